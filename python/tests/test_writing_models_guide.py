"""docs/writing-models.md: every ```python block of the guide runs, in order, in one namespace
(later blocks build on earlier ones), and the `assert`s in the blocks are the guide's claims (the
loss falls, gradients keep their parameters' layouts, where the collectives are, recompute_grad's
gradients and memory). The repository paths the guide names exist."""
import linecache
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GUIDE = os.path.join(ROOT, "docs", "writing-models.md")


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


@pytest.fixture
def guide_text():
    with open(GUIDE, encoding="utf-8") as f:
        return f.read()


@pytest.mark.usefixtures("fresh_fallbacks")
def test_every_snippet_runs_in_order_and_its_claims_hold(guide_text):
    blocks = python_blocks(guide_text)
    assert len(blocks) >= 10, "the guide's python blocks were not found"
    namespace = {"__name__": "writing_models_guide"}
    try:
        for i, source in enumerate(blocks, 1):
            name = f"docs/writing-models.md, python block {i}"
            linecache.cache[name] = (len(source), None, source.splitlines(True), name)
            exec(compile(source, name, "exec"), namespace)
    finally:
        import tessel
        if tessel.op_profile_enabled():
            tessel.stop_op_profile()
    # What the last blocks leave behind: the run trained, and the guide reached its end.
    assert namespace["losses"][-1] < namespace["losses"][0]
    assert namespace["recomputed_peak"] < namespace["plain_peak"]


def test_the_paths_it_names_exist(guide_text):
    paths = set(re.findall(r"`((?:examples|docs|python)/[\w./-]+)`", guide_text))
    paths |= {"docs/" + p for p in re.findall(r"\]\(([\w-]+\.md)\)", guide_text)}
    assert "examples/gpt/gpt.py" in paths and "examples/llama/llama.py" in paths
    missing = sorted(p for p in paths if not os.path.exists(os.path.join(ROOT, p)))
    assert missing == []
