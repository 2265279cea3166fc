"""Test helpers: what the tests share that is not a test (fake and scripted
model providers, process and kernel helpers, the inspect oracle, task files
the CLI loads, the verifiers proofs' tasksets and the scripts they run). Imported as `helpers.<module>` (tests/ is on sys.path under
pytest, and on PYTHONPATH for the subprocesses the tests start)."""
