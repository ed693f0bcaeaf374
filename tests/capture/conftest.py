"""The offline tests' tiny Hugging Face revisions and probe rows, for the measuring unit's test across adapters."""

from tests.offline.conftest import hf_revisions, probe_rows  # noqa: F401 - fixtures
