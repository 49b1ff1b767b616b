"""expect_raises, shared by the multi-rank case scripts (ranks.py, the MindSpore suite's
ms_ranks.py): torch-free."""


def expect_raises(kind, fn, *fragments):
    """fn() raises exactly `kind` (not a subclass of another kind) whose message holds every
    fragment."""
    try:
        fn()
    except kind as e:
        for f in fragments:
            assert f in str(e), f"{kind.__name__} message {str(e)!r} lacks {f!r}"
        return
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"expected {kind.__name__}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {kind.__name__}, nothing was raised")
