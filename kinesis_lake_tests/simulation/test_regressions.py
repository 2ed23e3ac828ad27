"""Schedules the simulation found (or that reproduce issue 31's defects), pinned.

Each is the shrunk replay of a failure: a few steps of the real code against the
simulated stream and the ambiguous catalog, checked after every step. Each failed on the
code before its fix (issue 31 names the commit it was seen failing on).
"""

from __future__ import annotations

from pathlib import Path

from kinesis_lake_tests.simulation.kinesis import REFUSE
from kinesis_lake_tests.simulation.world import run_schedule

_HOUR = 3_600_000


def test_an_empty_batch_racing_another_writer_never_rolls_positions_back(tmp_path: Path):
    """Defect 1 (seen failing on 9eea889: positions-behind-data at the race). The main
    query's batch reads nothing; a second writer started without checkpoint commits 5
    new records inside the main query's commit; the main query's metadata-only commit
    must not put the positions back, or its next batch commits the 5 again."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 3, False),
            ("run", "main", 1, None),
            ("second_writer", False),
            ("race", "main", "second", 5),
            ("run", "main", 2, None),
        ],
        shards=1,
    )
    assert sum(state.lake.rows().values()) == 8


def test_records_expired_in_an_outage_are_reported_even_after_an_empty_read(tmp_path: Path):
    """Defect 2 (seen failing on 9eea889: silent-loss at the last step). Shard 0's three
    records expire in an outage; the run that shard 1's backlog starts finds shard 0
    empty, and must not record that as a quiet shard: when shard 0 is read again, the
    three are reported lost, not skipped silently."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 2, False),
            ("put", 1, 2, False),
            ("run", "main", 1, None),
            ("outage", 10 * _HOUR),
            ("put", 0, 3, False),
            ("outage", 25 * _HOUR),
            ("put", 1, 1, False),
            ("run", "main", 2, None),
            ("put", 0, 2, False),
            ("run", "main", 2, None),
        ],
        shards=2,
    )
    assert "shardId-000000000000" in state.reported


def test_a_stream_quiet_for_longer_than_retention_is_not_data_loss(tmp_path: Path):
    """Defect 3 (seen failing on 9eea889 and after defect 2's fix: false-loss at the
    sensor's run). One ingest, 30 quiet hours with the deployment up (the sensor ticking
    and finding no backlog), then new records: the sensor's run must take them, with no
    data-loss error, since none was lost."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 3, False),
            ("run", "main", 1, None),
            ("advance", 30 * _HOUR),
            ("put", 0, 5, False),
            ("sensor",),
        ],
        shards=1,
    )
    assert sum(state.lake.rows().values()) == 8


def test_a_quiet_stream_whose_resume_position_is_refused_is_not_data_loss(tmp_path: Path):
    """Defect 3 when Kinesis refuses the aged-out resume position outright (shrunk from
    seed 2; seen failing on 9eea889 and after defect 2's fix, before defect 3's): eight
    records read, 40 quiet hours with the sensor ticking, then a run."""
    run_schedule(
        tmp_path,
        [("put", 4, 8, False), ("advance", 40 * _HOUR), ("run", "main", 4, None)],
        shards=1,
        trimmed_position=REFUSE,
    )


def test_a_batch_that_died_before_its_commit_and_expired_in_an_outage_is_reported_lost(
    tmp_path: Path,
):
    """Found by the simulation (new; fails on 9eea889 and today). A batch read three
    records and died before the sink committed them; an outage outlasted retention; every
    restart then replays the pinned range, cannot reproduce it ("the end record is gone")
    and fails with the same ShardReadError, for ever: ingestion is stuck, and the three
    records, lost, are never reported as loss (so failOnDataLoss=false cannot help)."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 3, False),
            ("run", "main", 1, "before-commit"),
            ("outage", 30 * _HOUR),
            ("put", 0, 2, False),
            ("run", "main", 1, None),
            ("run", "main", 1, None),
            ("run", "main", 1, None),
            ("run", "main", 2, None),
        ],
        shards=1,
    )
    assert "shardId-000000000000" in state.reported
    assert sum(state.lake.rows().values()) == 2


def test_records_expired_on_a_shard_never_read_past_its_start_are_reported(tmp_path: Path):
    """Found by the simulation (new; fails on 9eea889 and today; shrunk from seed 136). A
    split's child is read to its tip while empty, so its cursor stays at TRIM_HORIZON;
    two records arrive and expire in an outage; the next read starts at the trim horizon,
    takes the newer records and moves past the lost two without a word. Only a start
    after a known record is checked for a gap: a TRIM_HORIZON start with a tip time older
    than the trim horizon cannot prove the shard was quiet either. Shard 1, empty and
    unread through the same outage, is reported first (possible loss, the README's rule
    for an outage longer than retention): the acknowledged run then reports the child."""
    state = run_schedule(
        tmp_path,
        [
            ("split", 0),
            ("run", "main", 3, None),
            ("put", 1, 2, False),
            ("outage", 29 * _HOUR),
            ("put", 1, 4, False),
            ("run", "main", 2, None),
            ("run", "main", 2, None),
        ],
        shards=2,
    )
    assert "shardId-000000000002" in state.reported


def test_records_expired_on_a_shard_empty_when_ingestion_started_are_reported(
    tmp_path: Path,
):
    """The same loss on a shard that was empty when the query started (fails on 9eea889;
    today the other shard's outage report stops the run first, so this pins the whole
    sequence: after acknowledging, shard 0's two lost records must be reported too)."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 1, 1, False),
            ("run", "main", 2, None),
            ("put", 0, 2, False),
            ("outage", 29 * _HOUR),
            ("put", 0, 4, False),
            ("run", "main", 2, None),
            ("run", "main", 2, None),
            ("run", "main", 2, None),
        ],
        shards=2,
    )
    assert "shardId-000000000000" in state.reported


def test_a_replay_whose_resume_record_aged_out_since_is_no_loss(tmp_path: Path):
    """Found by the simulation (new; shrunk from seed 5032). A query started without
    checkpoint reads 4 records after a 23-hour-old committed one; its commit is applied
    late (the catalog was still processing it), so the batch is replayed 1.4 hours later:
    by then the committed record aged out, and the replay reports a data loss, though the
    first attempt found that record and read the whole range after it."""
    run_schedule(
        tmp_path,
        [
            ("put", 4, 7, False),
            ("advance", 82932903),
            ("lose_checkpoint",),
            ("put", 2, 4, False),
            ("late_commit", "unknown"),
            ("run", "main", 2, None),
            ("advance", 3100576),
            ("advance", 1982662),
            ("run", "main", 3, "after-commit"),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )


def test_records_expired_on_an_empty_shard_are_reported_after_a_checkpoint_lost(
    tmp_path: Path,
):
    """Found by the simulation (seed 11 of the 300 s run, shrunk), once the two above were
    fixed. A query reads an empty shard to its tip; three records arrive and expire in
    an outage; the checkpoint is lost, so the new query starts at the trim horizon with
    no read to the tip on record and took the four newer records without a word. The
    deployment's progress folder, which outlives the checkpoint, still holds that read's
    time: the new query's start takes it over, and the gap is reported."""
    state = run_schedule(
        tmp_path,
        [
            ("run", "main", 2, None),
            ("put", 3, 3, False),
            ("outage", 93345723),
            ("put", 3, 4, True),
            ("lose_checkpoint",),
            ("run", "main", 2, None),
        ],
        shards=1,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000000" in state.reported


def test_records_expired_on_a_child_never_read_are_reported(tmp_path: Path):
    """Found by the simulation (seed 11 of a 300 s run after d925520, shrunk). The only
    shard is read to its tip while empty, then split; records arrive on a child and
    expire in an outage; the checkpoint is lost. The child was never read, so nothing
    told the new query when it was last known empty, and the loss was skipped silently.
    Now a child never read takes its parent's last read-to-tip time (the parent was open
    then): both children, empty at that read and unread through the outage, are possible
    loss; the first fails the query, the acknowledged run reports the one that lost
    records."""
    state = run_schedule(
        tmp_path,
        [
            ("run", "main", 2, None),
            ("split", 7),
            ("put", 3, 3, False),
            ("outage", 93345723),
            ("put", 3, 4, True),
            ("lose_checkpoint",),
            ("run", "main", 2, None),
            ("run", "main", 2, None),
        ],
        shards=1,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000002" in state.reported


def test_records_expired_on_a_child_the_planner_found_are_reported(tmp_path: Path):
    """Found by the simulation (seed 10136 of a 1,500 s run at b1ef122, shrunk; fails at
    71bdee6 too). Three empty shards are read to their tips; shard 2 splits; records
    arrive on a child and expire in a 72 h outage; the next runs keep their checkpoint,
    plan the children from TRIM_HORIZON and moved past the lost records without a report.
    A child the planner finds now takes its parents' read-to-tip time."""
    state = run_schedule(
        tmp_path,
        [
            ("run", "main", 4, None),
            ("split", 2),
            ("put", 3, 4, False),
            ("outage", 260680305),
            ("put", 3, 4, False),
            ("advance", 97712828),
        ],
        shards=3,
        trimmed_position=REFUSE,
    )
    assert state.reported


def test_an_available_now_run_after_an_old_checkpoint_copy_ran_empty_batches_reads_everything(
    tmp_path: Path,
):
    """Found by the simulation (seed 26 of a 300 s run, shrunk; fails the same on
    1ef987f). Analysed: a product bug, not a harness artifact. The harness's writer id is
    the checkpoint's query id, as Spark's (the id in the checkpoint's metadata, which a
    copied checkpoint keeps; the sink's default writerId). The second writer, started
    from a saved copy of the main checkpoint, runs two batches that read nothing (each
    epoch's offset differs by its tipMs, so Spark runs them) and commits them: with no
    files, a metadata-only commit moves the shared watermark to 2. The main query's next
    batch (id 1) reads the 2 new records, and commit_files returns skipped_duplicate
    (batch 1 <= watermark 2); Spark records the batch as committed, the source commits
    its end offset, and the records are never read again. The overlap guard cannot fire:
    the copy's batches held no records. (The schedule's "during-abort" crash never
    happens: no commit raised; the schedule fails the same without it.) Fixed in the
    sink: a batch skipped as already committed whose positions are past the table's
    committed positions was not the one that landed, so it fails as a diverged
    checkpoint (DivergedCheckpointError, an OverlappingPositionsError: the runbook deletes
    the refused checkpoint) instead of being dropped."""
    run_schedule(
        tmp_path,
        [
            ("put", 4, 2, False),
            ("sensor",),
            ("save_checkpoint",),
            ("second_writer", True),
            ("run", "second", 2, None),
            ("put", 1, 2, False),
            ("sensor",),
        ],
        shards=3,
        trimmed_position=REFUSE,
    )


def test_a_replay_reading_a_shard_gone_from_the_stream_finishes_it(tmp_path: Path):
    """Found by the simulation (seed 20147, shrunk; fails at f236913). A second machine,
    started without checkpoint, plans its first batch while shard 2 (split 8 h before,
    never holding a record) is still listed; the batch fails on shard 1's possible loss
    (its committed record aged out, the README's limit). 22 hours later shard 2 is past
    retention and no longer in the stream, and every replay of the batch failed at
    GetShardIterator with ResourceNotFoundException, for ever: a ShardReadError, so
    failOnDataLoss=false could not help. A shard gone from the stream is a closed shard
    with nothing left after the start: finished, and a loss only where the gap rules say
    records may have expired unread."""
    run_schedule(
        tmp_path,
        [
            ("second_writer", True),
            ("put", 1, 8, False),
            ("advance", 100164528),
            ("split", 5),
            ("put", 6, 5, False),
            ("advance", 28910933),
            ("run", "second", 3, None),
            ("race", "second", "main", 4),
            ("advance", 77978337),
            ("race", "second", "main", 1),
            ("run", "second", 1, None),
            ("run", "second", 3, None),
        ],
        shards=3,
        trimmed_position=REFUSE,
    )


def test_records_expired_before_any_query_ran_are_no_ones_loss(tmp_path: Path):
    """Found by the simulation (seed 30023, shrunk; fails at f236913), analysed: a harness
    artifact. A second writer is started by a step of its own, with no checkpoint, and
    first runs 53 hours later; the six records put in between expired, and the check
    counted them from the step that made the query. Spark asks a source for its initial
    offset at the query's first trigger, at once on a real start, so ingestion starts
    with a query's first batch: that is when the harness starts counting now."""
    state = run_schedule(
        tmp_path,
        [
            ("second_writer", True),
            ("put", 5, 6, False),
            ("outage", 192873025),
            ("put", 4, 2, False),
            ("run", "second", 2, None),
        ],
        shards=1,
        trimmed_position=REFUSE,
    )
    assert sum(state.lake.rows().values()) == 2


def test_a_parent_left_unfinished_and_gone_is_reported_after_a_checkpoint_lost(tmp_path: Path):
    """Found while fixing seed 20147, once the invariants counted a shard gone from the
    stream as passed when a child of it has a committed position (a gone shard's own
    position never moves past its lost records; fails at f236913). Two records arrive on
    the only shard after its last read, it splits, an outage takes them and the parent
    with them, and the checkpoint is lost: the new query's first offset knew only the
    listed shards, so the parent's loss went unreported while its children were read.
    The deployment's progress records say the parent was left unfinished: the new query
    plans it, and reports it gone before its end."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 3, False),
            ("run", "main", 2, None),
            ("put", 0, 2, False),
            ("split", 0),
            ("outage", 30 * _HOUR),
            ("lose_checkpoint",),
            ("put", 1, 1, False),
            ("run", "main", 2, None),
            ("run", "main", 2, None),
        ],
        shards=1,
    )
    assert "shardId-000000000000" in state.reported


def test_records_expired_on_a_shard_never_committed_are_reported_by_a_start_knowing_nothing(
    tmp_path: Path,
):
    """Found by the simulation (seed 30023 of a 900 s run, shrunk; fails at f236913 too).
    The main query reads the only shard to its tip while it is empty; six records arrive
    and expire in a 53-hour outage; a second machine then starts with neither a
    checkpoint nor the deployment's progress records (a lost volume that held both) and
    read the shard from its trim horizon: the table had no position on it, nothing it
    could read said the shard was read before, and it took the two newer records past the
    six without a word. Now each run keeps its reads to the tip and its start in the raw
    table (pipeline/earlier_reads.py), and the new query's earlierReads option carries
    them."""
    run_schedule(
        tmp_path,
        [
            ("run", "main", 4, None),
            ("second_writer", True),
            ("put", 5, 6, False),
            ("outage", 192873025),
            ("put", 4, 2, False),
            ("run", "second", 2, None),
        ],
        shards=1,
        trimmed_position=REFUSE,
    )


def test_outages_in_a_row_add_up_to_one_past_retention(tmp_path: Path):
    """Found by the simulation (seed 40156 of a 900 s run, shrunk), analysed: a harness
    artifact. Two outages in a row, 12.8 h and 14.7 h, left the shards unread for longer
    than retention; the harness judged each outage alone, so the possible loss the
    product rightly reported on an empty shard (README, Retention and time) counted as a
    false one."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 6, 1, False),
            ("sensor",),
            ("outage", 45921320),
            ("outage", 52860278),
            ("lose_checkpoint",),
            ("run", "main", 4, None),
            ("run", "main", 4, None),
        ],
        shards=3,
    )
    assert state.unobserved


def test_records_expired_on_a_child_of_a_parent_no_plan_saw_are_reported(tmp_path: Path):
    """Found by the simulation (seed 40118 of a 900 s run, shrunk; fails at c18b6ef). Two
    merges between two plans: shards 0 and 1 into 3, then 2 and 3 into 4; six records
    arrive on 4 and expire in a 24-hour outage that takes every parent with it. Shard 3
    was never in a plan, so 4 inherited no read-to-tip time and its first read, from the
    trim horizon, moved past the six without a word. A parent no plan saw now stands for
    the last plan's listing time (it was created after it)."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 0, 5, False),
            ("sensor",),
            ("merge", 6),
            ("merge", 0),
            ("put", 6, 6, False),
            ("outage", 86603980),
            ("run", "main", 1, "before-commit"),
            ("put", 0, 6, False),
            ("run", "main", 2, None),
        ],
        shards=3,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000004" in state.reported


def test_records_expired_after_a_failed_first_batch_are_reported_after_a_checkpoint_lost(
    tmp_path: Path,
):
    """Found by the simulation (seed 40299 of a 900 s run, shrunk; fails at f236913). The
    deployment's first batch reads both empty shards to their tip, and its commit fails
    (it lands later): no epoch completed, so no status was written. Four records arrive
    and expire in a 25-hour outage; the checkpoint is lost; the new query found no status
    and read shard 1 from its trim horizon past them without a word. It now takes the
    failed batch's empty reads from the progress records: both shards are possible loss,
    the first fails the run, the acknowledged one reports the other and goes on."""
    state = run_schedule(
        tmp_path,
        [
            ("late_commit", "unknown"),
            ("run", "main", 2, "after-commit"),
            ("put", 3, 4, False),
            ("outage", 89199757),
            ("lose_checkpoint",),
            ("put", 1, 3, False),
            ("sensor",),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000001" in state.reported
    assert sum(state.lake.rows().values()) == 3


def test_records_expired_before_a_failed_first_batch_was_replayed_are_reported(tmp_path: Path):
    """Found by the simulation (seed 40299 again, once the case above was fixed, shrunk;
    fails at fbde57a). The query's first batch fails (shard 0 throttled past its
    retries) with shard 1 unread; four records arrive on shard 1 and expire in a
    25-hour outage; the replay reads shard 1 from its trim horizon, which no read had
    reached, and took the three newer records past the four without a word. A query is
    answerable for what arrives once it started: a start not after a known record, on a
    shard no read found at its tip yet, is checked from the query's start."""
    state = run_schedule(
        tmp_path,
        [
            ("throttle", 0, 6),
            ("run", "main", 2, "after-commit"),
            ("put", 3, 4, False),
            ("outage", 89199757),
            ("put", 1, 3, False),
            ("sensor",),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000001" in state.reported
    assert sum(state.lake.rows().values()) == 3


def test_records_expired_on_a_child_after_a_run_that_published_nothing_are_reported(
    tmp_path: Path,
):
    """Found by the simulation (seed 40299 a third time, shrunk; fails at b4e2283). A run
    of one batch reads six records of shard 0 and finds shard 1 empty, commits, and stops
    before publishing a status; the two merge, seven records on the child expire in a
    25-hour outage, and the checkpoint is lost. The failed-batch fallback counted only
    empty reads, so shard 0 had no read-to-tip time and the child inherited none: a read
    whose records the table holds counts as well."""
    state = run_schedule(
        tmp_path,
        [
            ("put", 4, 6, True),
            ("run", "main", 1, "during-abort"),
            ("merge", 0),
            ("put", 5, 7, False),
            ("outage", 89199757),
            ("lose_checkpoint",),
            ("put", 1, 3, False),
            ("sensor",),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000002" in state.reported


def test_records_expired_after_a_first_batch_failed_with_nothing_read_are_reported(
    tmp_path: Path,
):
    """Found by the simulation (seed 40299, shrunk once more). The first batch fails
    (shard 0 throttled past its retries) before any read was recorded; four records
    arrive on shard 1 and expire in a 25-hour outage; the checkpoint, which held the
    query's start, is lost: the new query's progress folder held no read of any shard,
    and it read shard 1 from its trim horizon past the four. Now each run keeps its plan
    beside its progress records, and the new query takes the first one's start."""
    run_schedule(
        tmp_path,
        [
            ("throttle", 0, 6),
            ("run", "main", 2, "after-commit"),
            ("put", 3, 4, False),
            ("outage", 89199757),
            ("lose_checkpoint",),
            ("put", 1, 3, False),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )


def test_records_expired_on_a_child_of_a_shard_never_read_are_reported_after_a_checkpoint_lost(
    tmp_path: Path,
):
    """Found by the simulation (seed 40299, shrunk a fourth time). A run of
    one batch reads shards 0 and 1 (1 closed by a split, its children waiting) and stops
    before publishing a status; 0 merges with the waiting child 2 into 4; seven records
    on 4 expire in a 25-hour outage; the checkpoint is lost. The new query knows 0's read
    to the tip but nothing of 2 (never read), and 4 inherits no time. The plan that
    listed 2, and so bounds 4's creation, was in the lost checkpoint; now each run keeps
    its last plan beside its progress records, and 4 takes that plan's listing time. (The
    first run after the outage reports shard 0, left unfinished; the acknowledged one
    reads 4.)"""
    run_schedule(
        tmp_path,
        [
            ("split", 7),
            ("run", "main", 1, "during-abort"),
            ("merge", 0),
            ("put", 5, 7, False),
            ("outage", 89199757),
            ("lose_checkpoint",),
            ("put", 1, 3, False),
            ("sensor",),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )


def test_every_shard_gone_before_its_end_is_named_by_the_run_that_skips_it(tmp_path: Path):
    """Found by the simulation (seed 50389 of a 900 s run from seed 50000, shrunk; fails at
    aa89f74). Both shards, read to their tip while empty, merge; three records arrive on
    shard 1 before, and all expire with both parents in a 55-hour outage. The error named
    shard 0 only, and the acknowledged run dropped both parents, counting two skipped
    ranges but naming neither: shard 1's loss went unnamed. The error now names every
    shard gone before its end, and the plan that skips them names each (the status lists
    them among the skipped gaps)."""
    state = run_schedule(
        tmp_path,
        [
            ("run", "main", 4, "during-abort"),
            ("put", 3, 3, False),
            ("merge", 2),
            ("outage", 200133642),
            ("put", 3, 5, False),
            ("advance", 42787090),
        ],
        shards=2,
    )
    assert {"shardId-000000000000", "shardId-000000000001"} <= state.reported


def test_a_parent_gone_after_a_checkpoint_lost_is_reported_without_a_committed_record(
    tmp_path: Path,
):
    """Found by the simulation (seed 50389 again, shrunk; fails at aa89f74). The same, but
    the checkpoint is lost before the merge, and neither parent ever had a record
    committed: the new query's first offset planned only gone shards the table names. The
    deployment's status says both were left unfinished, which is what counts."""
    state = run_schedule(
        tmp_path,
        [
            ("run", "main", 4, "during-abort"),
            ("lose_checkpoint",),
            ("put", 3, 3, False),
            ("merge", 2),
            ("outage", 200133642),
            ("put", 3, 5, False),
            ("advance", 42787090),
        ],
        shards=2,
    )
    assert "shardId-000000000001" in state.reported


def test_a_parent_no_plan_saw_and_gone_is_reported(tmp_path: Path):
    """Found by the simulation (seed 50318 of a 900 s run from seed 50000, shrunk; fails at
    aa89f74). Between two plans, a merge's child (shard 4) takes three records and is
    merged again; all expire with it in a 53-hour outage. No plan ever listed 4, so
    nothing read it, and its child was read as if it had none. A parent that a shard new
    to the plan names, neither listed nor known to the last plan, was created after that
    plan and is gone: it is reported like any shard gone before its end."""
    state = run_schedule(
        tmp_path,
        [
            ("split", 2),
            ("run", "main", 1, None),
            ("merge", 2),
            ("put", 3, 3, False),
            ("merge", 2),
            ("outage", 190981167),
            ("put", 6, 1, False),
            ("run", "main", 1, None),
            ("sensor",),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000004" in state.reported


def test_a_checkpoint_less_start_stays_blind_to_records_aged_out_until_it_reads(
    tmp_path: Path,
):
    """Found by the simulation (seed 50257 of a 900 s run from seed 50000, shrunk),
    analysed: a harness artifact. After the checkpoint is lost, the new query reports
    shard 0's aged-out committed record as possible loss (the README's limit); an hour
    later its acknowledged run finds shard 1's aged out too, and reports it, rightly: no
    read to the tip of it is on record. The harness judged blindness once, at the first
    start."""
    run_schedule(
        tmp_path,
        [
            ("put", 4, 1, False),
            ("advance", 3124424),
            ("put", 3, 8, False),
            ("advance", 54476655),
            ("advance", 1692551),
            ("outage", 3257404),
            ("run", "main", 4, None),
            ("advance", 3353552),
            ("lose_checkpoint",),
            ("advance", 53738364),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )


def test_a_checkpoint_less_start_stays_blind_to_a_shard_it_has_not_read_to_its_tip(
    tmp_path: Path,
):
    """Found by the simulation (seed 50548 of a 900 s run from seed 50000, shrunk),
    analysed: a harness artifact. After the checkpoint is lost, the new query finishes
    the parent, then fails on a throttled child for hours; the other child's committed
    record ages out meanwhile and its replay reports possible loss, rightly (no read to
    its tip on record). The harness took the query's first successful batch for a read
    of every shard; now a shard stays excused until the checkpoint has read it to its
    tip."""
    run_schedule(
        tmp_path,
        [
            ("merge", 2),
            ("advance", 13703323),
            ("split", 2),
            ("put", 5, 4, False),
            ("advance", 73319380),
            ("lose_checkpoint",),
            ("put", 6, 2, False),
            ("throttle", 4, 5),
            ("advance", 61906922),
        ],
        shards=3,
    )


def test_a_run_whose_first_commit_failed_still_leaves_its_reads_for_a_start_knowing_nothing(
    tmp_path: Path,
):
    """Found by the simulation (seed 90006 of a 900 s run from seed 90000, shrunk). A
    second machine's run reads both shards to their tip while empty, and its commits fail
    ambiguously; eight records arrive on shard 1 and expire in a 26-hour outage; the main
    query then starts with neither checkpoint nor progress records of its own. The run
    that failed recorded nothing in the table (only a run that ended well did, and only
    a published status), so the main query read the shard from its trim horizon past the
    eight. Now every run records, failed or not, its first batch's empty reads and its
    plan's start included."""
    run_schedule(
        tmp_path,
        [
            ("second_writer", True),
            ("catalog_fault", True, "unknown"),
            ("run", "second", 3, None),
            ("put", 5, 8, False),
            ("outage", 94591216),
            ("put", 5, 8, False),
            ("run", "main", 3, None),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )


def test_a_child_read_to_its_end_is_not_reported_after_a_checkpoint_lost(tmp_path: Path):
    """Found by the simulation (seed 110139 of a 300 s run from 110000, at 8a45ded). The
    sensor's first run ingests six records, its quiet runs read every shard to the tip for
    days; a merge and a split follow, and the next run reads the merge's child to its end
    (finished: a closed shard has no read to the tip of its own). Its checkpoint lost, a
    new query re-read the child from its trim horizon, found nothing, and could only take
    it for quiet since the first run's start, days before the child existed: possible loss
    reported, none happened. A shard the earlier plan finished now counts as read to the
    tip when that plan listed the stream (``finished_tips``), in the plan and in the
    table's ``read-to-tip`` property alike."""
    run_schedule(
        tmp_path,
        [
            ("put", 1, 6, False),
            ("advance", 309162008),
            ("merge", 3),
            ("split", 1),
            ("run", "main", 4, None),
            ("lose_checkpoint",),
            ("run", "main", 2, None),
            ("run", "main", 3, None),
        ],
        shards=3,
        trimmed_position=REFUSE,
    )


def test_a_second_writer_after_days_of_quiet_runs_is_not_told_of_a_loss(tmp_path: Path):
    """Found by the simulation (seed 150052 of a 240 s run from 150000, at 5ca147b; it
    failed at 953297d too). A split; the first run reads the parent to its end, and its
    last status holds no shard (the children wait for their parent), so the sensor took
    the stream for one with nothing to prove and never launched a quiet run: for 3.7 days
    nothing read the children. A second writer started without checkpoint then reported
    possible loss on a child, its only read to the tip on record the parent's at +2 s,
    though nothing had arrived. Now, once an epoch completed, a shard with no read to the
    tip on record makes a run due (pipeline/data_loss.py ``quiet_proof``)."""
    run_schedule(
        tmp_path,
        [
            ("split", 3),
            ("run", "main", 2, None),
            ("second_writer", True),
            ("advance", 322827521),
            ("race", "main", "second", 4),
        ],
        shards=1,
        trimmed_position=REFUSE,
    )


def test_an_empty_closed_shard_that_ages_out_while_ingestion_is_down_is_possible_loss(
    tmp_path: Path,
):
    """Found by the simulation (seed 130584; fails on 777eb60 and 178ecaf: false-loss).
    Two splits at the stream's start leave closed, empty shards 1 and 3 (3 a child of 1);
    the first records arrive 22 h later, and the first run reads shard 1 to its end but
    its commit lands and then raises. Before the next run, shard 3 (unread: its parent
    was not finished when the failed batch was planned) leaves the listing. Kinesis lists
    no record count, so the code cannot tell an empty shard from one whose records, put
    24 h ago and still retained when ingestion started, expired while it was down: the
    report is a possible loss, as after an outage, and it must say so; the acknowledged
    run then takes the two records."""
    state = run_schedule(
        tmp_path,
        [
            ("split", 5),
            ("split", 5),
            ("advance", 41_548_900),
            ("advance", 38_788_788),
            ("catalog_fault", True, "generic"),
            ("put", 5, 2, False),
            ("advance", 29_618_108),
        ],
        shards=2,
        trimmed_position=REFUSE,
    )
    assert "shardId-000000000003" in state.reported
    assert sum(state.lake.rows().values()) == 2
