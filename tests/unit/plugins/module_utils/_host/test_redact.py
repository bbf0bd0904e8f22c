import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK, Redactor


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


@pytest.mark.parametrize("argv, masked", [
    (["--api-k", "sk1"], ["--api-k", MASK]),                       # argparse takes a unique prefix for the flag
    (["--api-k=sk1"], ["--api-k=" + MASK]),
    (["--admin-api", "adm1"], ["--admin-api", MASK]),
    (["--admin-api-key=adm1"], ["--admin-api-key=" + MASK]),
    (["--hf-tok", "hf_1"], ["--hf-tok", MASK]),
    (["--adm=adm1"], ["--adm=" + MASK]),
    (["--port", "1", "--host", "h", "--tp", "2"], ["--port", "1", "--host", "h", "--tp", "2"]),
    (["--", "x"], ["--", "x"]),                                       # the end of the options is no prefix
])
def test_argparse_prefixes_of_every_secret_flag(argv, masked):
    r = Redactor()
    assert r.argv(argv) == masked
    text = r(" ".join(argv))
    assert text == " ".join(masked)
    secrets = [a for a, m in zip(argv, masked) if a != m]
    assert sorted(r.secrets_of(argv, {})) == sorted(a.partition("=")[2] or a for a in secrets)


@pytest.mark.parametrize("name", ["DB_PASS", "db_pass", "MYSQL_PASSWD", "PGPASSWORD", "LDAP_PWD", "GOOGLE_CREDENTIALS",
                                  "AZURE_CREDENTIAL_FILE", "BASIC_AUTH", "NPM_AUTH_TOKEN", "SMTP_AUTH_USER",
                                  "GPG_PASSPHRASE", "CLIENT_SECRET_ID", "HF_TOKEN", "OPENAI_APIKEY", "MY_API_KEY"])
def test_common_secret_names(name):
    r = Redactor()
    assert r.env({name: "s3cr3t"}) == {name: MASK}
    assert r("%s=s3cr3t python -m sglang.launch_server" % name) == "%s=%s python -m sglang.launch_server" % (name, MASK)
    assert r.secrets_of(["env", "%s=s3cr3t" % name, "python"], {}) == ["s3cr3t"]
    assert r.secrets_of([], {name: "s3cr3t"}) == ["s3cr3t"]


@pytest.mark.parametrize("name", ["PATH", "PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "NCCL_P2P_LEVEL", "BYPASS",
                                  "PASSES", "KEYBOARD"])
def test_names_that_hold_no_secret(name):
    assert Redactor().env({name: "v"}) == {name: "v"}


def test_a_flag_before_a_secret_flag_does_not_hide_it():
    r = Redactor()
    assert r("serve --verbose --api-k sk1 --enable-metrics --admin-api-key=a2") == \
        "serve --verbose --api-k %s --enable-metrics --admin-api-key=%s" % (MASK, MASK)
    assert r.secrets_of(["--api-key", "--port", "1"], {}) == [], "no value: the next element is an option"


def test_one_reader_of_an_options_value():
    """argparse takes the last `--port N` or `--port=N`: every --port of the collection's Python is read by
    argv_option (the role's inputs, the boot lines, the units' ExecStart), never by a loop of its own that could take
    the first."""
    import ast
    from tests.unit.conftest import ROOT
    readers = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        tree = ast.parse(path.read_text())
        allowed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "argv_option":
                allowed.update(id(a) for a in node.args)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ("--port", "--port=") \
                    and id(node) not in allowed:
                readers.append("%s:%d" % (path.relative_to(ROOT), node.lineno))
    assert readers == []
    from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import argv_option
    assert argv_option(["--port", "1", "--port=2"], "--port") == "2"
    assert argv_option(["--port=2", "--port", "3"], "--port") == "3"


def test_the_tls_keys_password_is_masked_and_its_path_is_not():
    r = Redactor()
    argv = ["python", "--ssl-keyfile", "/etc/tls/k.pem", "--ssl-keyfile-password", "pem-pass-1", "--ssl-keyfile-p=x2"]
    assert r.argv(argv) == ["python", "--ssl-keyfile", "/etc/tls/k.pem", "--ssl-keyfile-password", MASK,
                            "--ssl-keyfile-p=" + MASK]
    assert r(" ".join(argv)) == ("python --ssl-keyfile /etc/tls/k.pem --ssl-keyfile-password %s --ssl-keyfile-p=%s"
                                 % (MASK, MASK))
    assert sorted(r.secrets_of(argv, {})) == ["pem-pass-1", "x2"]


def test_the_secret_flags_rule():
    """A word of the name says password, secret, token or key; `tokens`, `tokenizer` are the model's text."""
    from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import (
        NOT_SECRET, SECRET_FLAGS, looks_secret)
    for option in SECRET_FLAGS + tuple(NOT_SECRET) + ("--my-secret", "--apikey", "--db-passwd", "--keystore"):
        assert looks_secret(option), option
    for option in ("--max-total-tokens", "--tokenizer-path", "--skip-tokenizer-init", "--port", "--monkeys"):
        assert not looks_secret(option), option
    assert not set(SECRET_FLAGS) & set(NOT_SECRET)


@pytest.mark.parametrize("line, values, masked", [
    # 0.5.15 logs its server_args at start: each quoted secret masked whole (spaces and all), its quotes kept, though
    # no value was given; the given values, the secret flags and NAME=value of the rest as before
    ("server_args=ServerArgs(api_key='sk-1')", ["sk-1"], "server_args=ServerArgs(api_key='%s')" % MASK),
    ("server_args=ServerArgs(model_path='/m', api_key='sk 1', admin_api_key='adm-2', hf_token=\"hf_3\", "
     "ssl_keyfile_password='pw4', port=30000) DB_PASS=x5 --token t6", [],
     "server_args=ServerArgs(model_path='/m', api_key='{0}', admin_api_key='{0}', hf_token=\"{0}\", "
     "ssl_keyfile_password='{0}', port=30000) DB_PASS={0} --token {0}".format(MASK)),
    ("model_path='/m sk-7' tokenizer_path='/t'", ["sk-7"], "model_path='/m %s' tokenizer_path='/t'" % MASK),
])
def test_a_repr_s_quoted_secrets_are_masked_whole(line, values, masked):
    assert Redactor(values=values)(line) == masked
