"""verify.findings: every stable finding code has a severity, a group and a description."""

from __future__ import annotations

from histaudit.verify.findings import (
    BEHAVIOUR_CODES,
    CODES,
    EffectRef,
    Finding,
    Group,
    Severity,
    task_ref,
)


def test_every_code_has_a_severity_a_group_and_a_description() -> None:
    for code, (severity, group, text) in CODES.items():
        assert isinstance(severity, Severity) and isinstance(group, Group) and text, code
        made = Finding.make(code, "i", None, "m")
        assert made.severity == severity and made.group is group


def test_a_codes_group_is_its_own_not_its_place_in_the_table() -> None:
    """Issue #51: the group was decided by a code's position, so a new code in the wrong
    place changed group silently. Now each row names it: tampering is integrity wherever
    it sits in the table, what a crash does is behaviour, and a finding carries its own
    code's group."""
    for code in ("body-changed", "signature-invalid", "capsule-invalid",
                 "dapr-history-purged"):
        assert CODES[code].group is Group.INTEGRITY and code not in BEHAVIOUR_CODES
    for code in ("activity-reexecuted", "effect-duplicate", "llm-call-repeated",
                 "workflow-terminated"):
        assert CODES[code].group is Group.BEHAVIOUR and code in BEHAVIOUR_CODES
    assert {c.group for c in CODES.values()} == set(Group)


def test_a_finding_lists_its_entries_with_seq_among_them_ascending() -> None:
    f = Finding.make("activity-reexecuted", "i", 6, "m", entries=[6, 2, 2],
                     task_id=1, activity="charge")
    assert f.entries == (2, 6)
    assert Finding.make("link-broken", "i", 3, "m").entries == (3,)
    assert Finding.make("head-missing", "i", None, "m").entries == ()
    # a forged entry's completed_seq that is not an integer is not an entry
    assert Finding.make("replay-mismatch", "i", 4, "m", entries=["3", True, None]).entries \
        == (4,)


def test_finding_json_has_every_key_null_where_it_does_not_apply() -> None:
    plain = Finding.make("link-broken", "i", 3, "m").to_json()
    assert plain == {"code": "link-broken", "severity": "error", "instance": "i", "seq": 3,
                     "entries": [3], "task_id": None, "activity": None, "effect": None,
                     "message": "m"}
    about = Finding.make("effect-duplicate", "i", 5, "m", entries=[4, 5],
                         effect=EffectRef("mail", "k1")).to_json()
    assert about["entries"] == [4, 5] and about["effect"] == {"name": "mail", "key": "k1"}


def test_task_ids_keep_integers_and_write_anything_else_as_text() -> None:
    assert task_ref(7) == 7 and task_ref(None) is None
    assert task_ref(True) == "True" and task_ref(1.0) == "1.0" and task_ref("x") == "x"
    assert Finding.make("activity-reexecuted", "i", 2, "m", task_id=True).task_id == "True"
