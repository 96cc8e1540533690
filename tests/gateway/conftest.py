import pytest
from botweave.model_calls import litellm_module


@pytest.fixture(scope="session", autouse=True)
def litellm_loaded() -> None:
    """litellm takes seconds to import: once, before the first test's turn would wait for it."""
    litellm_module()
