from ansible_collections.inferops.sglang.plugins.module_utils._redact import MASK, Redactor


def test_flags_env_and_values():
    r = Redactor(flags=["--secret-flag"], values=["hunter2"])
    line = "python -m sglang.launch_server --api-key sk-1 --port 30000 HF_TOKEN=abc AWS_SECRET_ACCESS_KEY=x " \
           "--secret-flag=v hunter2 --admin-api-key Adm1nV4l"
    out = r(line)
    for secret in ("sk-1", "abc", "=x", "=v", "hunter2", "Adm1nV4l"):
        assert secret not in out
    assert "--port 30000" in out and out.count(MASK) == 6


def test_argv_and_env():
    r = Redactor()
    assert r.argv(["python", "--api-key", "k", "--api-key=k2", "--port", "1"]) == \
        ["python", "--api-key", MASK, "--api-key=" + MASK, "--port", "1"]
    assert r.env({"HF_TOKEN": "t", "MY_API_KEY": "k", "PATH": "/bin", "NCCL_P2P_LEVEL": "NVL"}) == \
        {"HF_TOKEN": MASK, "MY_API_KEY": MASK, "PATH": "/bin", "NCCL_P2P_LEVEL": "NVL"}


def test_secrets_of_uses_the_masking_rules():
    r = Redactor(flags=["--extra"])
    argv = ["python", "--api-key", "k1", "--hf-token=t2", "--extra", "x3", "--port", "1"]
    env = {"HF_TOKEN": "t4", "MY_API_KEY": "k5", "PATH": "/bin"}
    assert sorted(r.secrets_of(argv, env)) == ["k1", "k5", "t2", "t4", "x3"]
