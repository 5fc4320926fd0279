"""The 2026 parallelism answer key (W7-W11): it answers the handout's problems as written, and its
checker credits the key, rejects wrong numbers item by item, and refuses answers it cannot read."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from autograder.answer_keys import parallelism_2026 as key_module
from autograder.answer_keys.parallelism_2026 import HANDOUT_FACTS, KEY, PROBLEMS, check, main, read_answers
from autograder.manifest import load_manifest, render_edition
from cs336_systems.model_sizes import MODEL_SIZES

KIT = Path(__file__).resolve().parents[2]
NUMERIC = [item for item in KEY if not item.choices and not math.isinf(item.answer)]


def _handout_section(section: str) -> str:
    """The 2026 handout's text of written problem ``section`` (its heading to the next), on one line."""
    text = render_edition((KIT / "handout" / "README.md").read_text(), "2026")
    match = re.search(rf"^### {section} .*?(?=^### |^<!-- |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"the 2026 handout has no {section} heading"
    return " ".join(match.group(0).split())


def _the_key() -> dict:
    return {item.key: item.answer for item in KEY}


def test_the_key_covers_the_2026_calculation_problems():
    writeup = {problem.section: problem.name for problem in load_manifest(edition="2026").writeup}
    assert {section: writeup.get(section) for section in PROBLEMS} == PROBLEMS
    assert {item.key.split(".")[0] for item in KEY} == set(PROBLEMS)
    assert len(KEY) >= 26 and len({item.key for item in KEY}) == len(KEY)


@pytest.mark.parametrize("section", sorted(HANDOUT_FACTS))
def test_the_handout_states_the_facts_the_key_uses(section):
    text = _handout_section(section)
    missing = [fact for fact in HANDOUT_FACTS[section] if fact not in text]
    assert not missing, f"{section} in the 2026 handout no longer says {missing}: update the key with the problem"


def test_w10s_tensor_parallel_split_is_well_posed_and_the_key_uses_its_model():
    """W10(c)'s model splits 8 ways by heads and by d_ff (the xl model's 25 heads would not), and the
    key's widths and parameter counts are the model table's."""
    text = _handout_section("W10")
    name, ways = re.search(r"\(c\) For the (\S+) model .*?T = (\d+)\)", text).groups()
    size = MODEL_SIZES[name]
    assert size.num_heads % int(ways) == 0 and size.d_ff % int(ways) == 0, (
        f"W10 splits the {name} model ({size.num_heads} heads, d_ff {size.d_ff}) {ways} ways: not divisible")
    assert (name, key_module.D_MODEL_27, key_module.BLOCKS_27) == ("2.7B", size.d_model, size.num_layers)
    table = (KIT / "handout" / "README.md").read_text()
    assert f"{key_module.XL_PARAMS / 1e6:.1f}M" in table and f"{key_module.B27_PARAMS / 1e6:.1f}M" in table


def test_the_checker_credits_the_key_and_three_figure_rounding():
    assert all(mark.status == "right" for mark in check(_the_key()))
    rounded = {key: float(f"{value:.3g}") if isinstance(value, float) and not math.isinf(value) else value
               for key, value in _the_key().items()}
    assert all(mark.status == "right" for mark in check(rounded))


@pytest.mark.parametrize("item", NUMERIC, ids=lambda item: item.key)
def test_the_checker_rejects_a_wrong_number(item):
    answers = _the_key()
    answers[item.key] = item.answer + 1 if isinstance(item.answer, int) else item.answer * 1.1
    marks = {mark.key: mark.status for mark in check(answers)}
    assert marks[item.key] == "wrong" and sum(status == "wrong" for status in marks.values()) == 1


def test_the_checker_rejects_gigabytes_taken_as_binary_and_the_wrong_choice():
    answers = _the_key()
    answers["W8.a"] = answers["W8.a"] * 2**30 / 1e9  # 7% high
    answers["W11.c"] = "tp"
    answers["W7.c.S_star_N2"] = 1e6  # the alternate ring always wins at N = 2: inf
    wrong = {mark.key for mark in check(answers) if mark.status == "wrong"}
    assert wrong == {"W8.a", "W11.c", "W7.c.S_star_N2"}


def test_the_w8_items_separate_the_two_links():
    """W8(d) is worth checking: hiding the all-reduce needs 1 sequence a rank on NVLink, 5 on PCIe."""
    answers = _the_key()
    assert (answers["W8.d.nvlink"], answers["W8.d.pcie"]) == (1, 5)
    answers["W8.d.pcie"] = answers["W8.d.nvlink"]  # the NVLink answer given for PCIe
    assert [mark.key for mark in check(answers) if mark.status == "wrong"] == ["W8.d.pcie"]


def test_missing_items_are_marked_missing():
    marks = check({"W8.a": _the_key()["W8.a"]})
    assert [mark.key for mark in marks if mark.status == "right"] == ["W8.a"]
    assert sum(mark.status == "missing" for mark in marks) == len(KEY) - 1


@pytest.mark.parametrize(("answers", "message"), [
    ({"W8.e": 1}, "no such items: W8.e"),
    ({"W8.d.pcei": 5}, "did you mean W8.d.pcie"),
    ({"W8.a": "7 GB"}, "W8.a: expected a number of bytes"),
    ({"W8.d.pcie": True}, "W8.d.pcie: expected a number"),
    ({"W11.c": "nvlink"}, r"W11.c: expected one of \['tp', 'fsdp', 'both'\]"),
])
def test_answers_the_checker_cannot_read_are_refused_with_the_item_named(answers, message):
    with pytest.raises(ValueError, match=message):
        check(answers)


def test_the_command_line_checks_a_file(tmp_path, capsys):
    good, bad, broken = tmp_path / "good.json", tmp_path / "bad.toml", tmp_path / "broken.toml"
    good.write_text(json.dumps({key: (value if not (isinstance(value, float) and math.isinf(value)) else "inf")
                                for key, value in _the_key().items()}))
    bad.write_text('"W8.a" = 3.5e9\n"W8.d.pcie" = 5\n')
    broken.write_text("W8.a = 3.5e9\n")  # unquoted: a table W8 with a key a
    assert main(["check", str(good)]) == 0
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^W8\.a\s+wrong\s+3\.5e\+09", out, re.MULTILINE) and re.search(r"^W8\.d\.pcie\s+right", out,
                                                                                      re.MULTILINE)
    assert "W8 data_parallel_calcs: 1 of 6 right" in out
    assert main(["check", str(broken)]) == 2 and "quote keys with dots" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cannot read"):
        read_answers(tmp_path / "absent.toml")


def test_the_template_lists_every_item_and_a_filled_one_is_read(tmp_path):
    assert main(["template"]) == 0
    text = key_module.template()
    assert [line.split('"')[1] for line in text.splitlines()[1:]] == [item.key for item in KEY]
    filled = tmp_path / "filled.toml"
    filled.write_text("\n".join(re.sub(r'^# ("[^"]+") =.*$', r"\1 = 1", line) for line in text.splitlines()))
    assert len(read_answers(filled)) == len(KEY)
    with pytest.raises(ValueError, match="W7.c.choice_1KB: expected one of"):  # a number where a choice goes
        check(read_answers(filled))
