"""The double's stand-in for sglang.srt: only what the command line needs (server_args)."""
