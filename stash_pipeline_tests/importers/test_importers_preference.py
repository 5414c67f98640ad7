"""Preference data sets: hh-rlhf text turns and TRL's standard and conversational forms."""

from __future__ import annotations

import gzip
import json

import pytest

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import ReviewedComparison
from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.pairs import pair_context
from stash_pipeline.importers import detect_format
from stash_pipeline_tests.support.importer_helpers import read_all, write_json, write_jsonl

HH = {"chosen": "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: Capital of France?"
                "\n\nAssistant: Paris.",
      "rejected": "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: Capital of France?"
                  "\n\nAssistant: I won't say."}


def pair_of(records):
    """The (chosen, rejected) traces and the comparison of one preference record."""
    assert len(records) == 2
    chosen, rejected = records
    (comparison,) = rejected.feedback
    assert chosen.feedback == () and isinstance(comparison, ReviewedComparison)
    return chosen.trace, rejected.trace, comparison


def test_hh_rlhf_text_is_one_context_with_two_last_turns(tmp_path):
    path = write_jsonl(tmp_path, "hh.jsonl", [HH])
    assert detect_format(path) == "preference"
    chosen, rejected, comparison = pair_of(read_all(path))
    roles = [m.role for m in chosen.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert chosen.messages[:3] == rejected.messages[:3]
    assert (chosen.messages[-1].content, rejected.messages[-1].content) == ("Paris.",
                                                                            "I won't say.")
    assert comparison.chosen_action_id == f"{chosen.id}/m3"
    assert comparison.rejected_action_id == f"{rejected.id}/m3"
    assert comparison.status == "approved" and comparison.author is None
    # Both sides are one task (the conversation); nothing stored names the record's position.
    assert chosen.task_id == rejected.task_id
    assert chosen.metadata["preference"] == {"conversation": chosen.task_id, "side": "chosen"}
    (pair,) = build_feedback_pairs([chosen, rejected], [comparison])
    assert pair.kind == "action" and pair.source_kind == "reviewed_comparison"
    assert pair_context(pair) == chosen.messages[:3]


def test_trl_standard_explicit_and_implicit_prompt(tmp_path):
    explicit = {"prompt": "The sky is", "chosen": " blue.", "rejected": " green.", "id": "r7"}
    path = write_jsonl(tmp_path, "standard.jsonl", [explicit])
    chosen, rejected, _ = pair_of(read_all(path, format="preference"))
    assert [(m.role, m.content) for m in chosen.messages] == [("user", "The sky is"),
                                                              ("assistant", " blue.")]
    assert rejected.messages[-1].content == " green."
    assert chosen.metadata["preference"]["id"] == "r7"
    # hh-rlhf is TRL's implicit-prompt standard form; an explicit prompt may use its turns too.
    turns = {"prompt": "\n\nHuman: Hi\n\nAssistant: Hey\n\nHuman: 2+2?",
             "chosen": "\n\nAssistant: 4", "rejected": "\n\nAssistant: 5"}
    chosen, rejected, _ = pair_of(read_all(write_jsonl(tmp_path, "t.jsonl", [turns])))
    assert [m.role for m in chosen.messages] == ["user", "assistant", "user", "assistant"]
    assert chosen.messages[-1].content == "4" and rejected.messages[-1].content == "5"


def test_trl_conversational_explicit_and_implicit_prompt(tmp_path):
    prompt = [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "What color is the sky?"}]
    explicit = {"prompt": prompt, "chosen": [{"role": "assistant", "content": "Blue."}],
                "rejected": [{"role": "assistant", "content": "Green."}]}
    implicit = {"chosen": [*prompt, {"role": "assistant", "content": "Blue."}],
                "rejected": [*prompt, {"role": "assistant", "content": "Green."}]}
    path = write_json(tmp_path, "conv.json", [explicit, implicit])
    assert detect_format(path) == "preference"
    records = read_all(path)
    first, second = pair_of(records[:2]), pair_of(records[2:])
    # The same pair in both forms: the same traces (ids follow the content, not the position).
    assert first[0].id == second[0].id and first[1].id == second[1].id
    assert [m.role for m in first[0].messages] == ["system", "user", "assistant"]
    assert first[2].chosen_action_id == f"{first[0].id}/m2"


def test_gzip_jsonl_and_a_directory_of_data_set_files(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(json.dumps(HH) + "\n" + json.dumps({**HH, "rejected": HH["chosen"][:-7]
                                                         + "Lyon."}) + "\n")
    assert len(read_all(path)) == 4
    assert len(read_all(tmp_path)) == 4  # .jsonl.gz files are trace files of a directory


@pytest.mark.parametrize(("record", "field", "reason"), [
    ({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: c\n\nAssistant: d"},
     "rejected", "do not share a prompt"),
    ({"chosen": "\n\nHuman: a\n\nAssistant: ", "rejected": "\n\nHuman: a\n\nAssistant: d"},
     "chosen", "is empty"),
    ({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: b"},
     "rejected", "nothing to compare"),
])
def test_a_record_that_is_no_comparison_is_skipped_and_named(tmp_path, record, field, reason):
    """Public data sets hold a few (hh-rlhf: an empty reply): the import goes on with the
    defaults, and each skipped record is reported with its line, field and reason."""
    path = write_jsonl(tmp_path, "some.jsonl", [HH, record, HH])
    skipped: list[InputError] = []
    assert len(read_all(path, format="preference", on_skipped=skipped.append)) == 4
    [error] = skipped
    assert (error.record, error.field) == ("line 2", field)
    assert reason in error.reason


@pytest.mark.parametrize(("record", "field", "reason"), [
    ({"chosen": "x", "rejected": 3}, "rejected", "expected a string or a list of messages"),
    ({"chosen": "x"}, "rejected", "needs 'rejected'"),
    ({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a"},
     "rejected", "must be an assistant turn, not user"),
    ({"chosen": [{"role": "wizard", "content": "x"}], "rejected": "y"}, "chosen[0].role",
     "unknown role"),
    ({"chosen": "intro\n\nHuman: a\n\nAssistant: b", "rejected": "y"}, "chosen",
     "text before the first"),
])
def test_a_malformed_record_is_refused_naming_line_field_and_the_option(tmp_path, record, field,
                                                                         reason):
    path = write_jsonl(tmp_path, "bad.jsonl", [HH, record])
    with pytest.raises(InputError) as caught:
        read_all(path, format="preference")
    error = caught.value
    assert (error.record, error.field) == ("line 2", field)
    assert reason in error.reason and "--skip-invalid" in error.reason


def test_skip_invalid_skips_and_reports_each_refusal(tmp_path):
    bad = {"chosen": "x", "rejected": 3}
    path = write_jsonl(tmp_path, "mixed.jsonl", [bad, HH, bad])
    skipped: list[InputError] = []
    records = read_all(path, skip_invalid=True, on_skipped=skipped.append)
    assert len(records) == 2
    assert [e.record for e in skipped] == ["line 1", "line 3"]


def test_author_and_reviewer_decide_independent_review(tmp_path):
    path = write_jsonl(tmp_path, "hh.jsonl", [HH])
    *_, independent = pair_of(read_all(path, author="labeler", reviewer="qa"))
    assert independent.independently_reviewed
    *_, own = pair_of(read_all(path, author="labeler", reviewer="labeler"))
    assert own.usable and not own.independently_reviewed
    *_, anonymous = pair_of(read_all(path))
    assert anonymous.usable and not anonymous.independently_reviewed


def test_owners_get_their_own_traces(tmp_path):
    path = write_jsonl(tmp_path, "hh.jsonl", [HH])
    ann, _, _ = pair_of(read_all(path, owner="ann"))
    bob, _, _ = pair_of(read_all(path, owner="bob"))
    assert ann.id != bob.id and ann.owner == "ann"
