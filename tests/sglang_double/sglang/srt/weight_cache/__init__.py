"""The weight cache (0.5.17 on; README.md "The weight cache daemon"). The package exists only from 0.5.17 (day2.md:
`sglang/srt/weight_cache/` is not in 0.5.16): as an older version the import fails as a missing module does, so
`python -m sglang.srt.weight_cache.daemon` says `No module named 'sglang.srt.weight_cache'` and exits 1."""
from sglang._double.config import at_least, emulated_version

if not at_least(emulated_version(), "0.5.17"):
    raise ModuleNotFoundError("No module named 'sglang.srt.weight_cache'", name="sglang.srt.weight_cache")
