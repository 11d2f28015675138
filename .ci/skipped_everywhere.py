"""Fails when a test was skipped in every CI stage that collected it and ran in none.

Reads the records .ci/run's pytest stages write (PUREJAXPPO_TEST_RECORD, tests/conftest.py): one file
FOLDER/STAGE.jsonl per stage, one JSON line {"id", "outcome", "reason"} per test collected there. A test
deselected in a stage has no line there (not a skip); one that passed or failed in any stage is fine. A test
file skipped whole while collected (importorskip) is recorded under the file's id: it is fine where any of its
tests ran in another stage.

    python .ci/skipped_everywhere.py [FOLDER]   (default .ci-records)
"""

import json
import pathlib
import sys


def read(folder) -> dict:
    """{stage: [record, ...]} of the folder's *.jsonl files, a stage named by its file."""
    return {path.stem: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for path in sorted(pathlib.Path(folder).glob("*.jsonl"))}


def skipped_everywhere(records: dict) -> dict:
    """{test id: {stage: skip reason}} of the tests (or test files, collections) skipped in every stage
    that recorded them and run in none (nor, for a collection, any test inside it)."""
    skips, ran = {}, set()
    for stage, lines in records.items():
        for line in lines:
            if line["outcome"] == "skipped":
                skips.setdefault(line["id"], {})[stage] = line["reason"]
            else:
                ran.add(line["id"])
    return {test: stages for test, stages in sorted(skips.items())
            if test not in ran and not any(other.startswith(test + "::") for other in ran)}


def main(argv) -> int:
    folder = argv[0] if argv else ".ci-records"
    records = read(folder)
    if not records:
        print(f"skipped_everywhere: no stage records (*.jsonl) in {folder}")
        return 2
    found = skipped_everywhere(records)
    for test, stages in found.items():
        reasons = "; ".join(f"{stage}: {reason}" for stage, reason in stages.items())
        print(f"skipped in every CI stage that collected it: {test} ({reasons})")
    if found:
        print(f"skipped_everywhere: {len(found)} test(s) never ran in any of the stages {', '.join(records)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
