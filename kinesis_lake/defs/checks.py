"""Asset checks: is every record in the lake exactly once, and is the lake keeping up?

Each check is its own ``@dg.asset_check`` (not a ``check_specs`` entry on the asset): an
asset must return a result for every spec it declares, and these checks are better run,
re-run and scheduled on their own. The numbers come from :mod:`kinesis_lake.pipeline.reconcile`;
here they only become verdicts, severities and metadata (numeric, so the UI plots them).

Blocking: ``raw_events`` duplicates block the derived tables, which would otherwise
carry the duplicates into every downstream count.

The checks of each stream's raw table are in :mod:`kinesis_lake.defs.raw_checks`, those of
the tables they feed in :mod:`kinesis_lake.defs.table_checks`.
"""

import dagster as dg

from kinesis_lake.defs.raw_checks import raw_checks
from kinesis_lake.defs.streams import StreamKeys
from kinesis_lake.defs.table_checks import table_checks
from kinesis_lake.events.declaration import LakeDeclaration


def all_checks(
    declaration: LakeDeclaration, streams: list[StreamKeys]
) -> list[dg.AssetChecksDefinition]:
    return [
        *(check for keys in streams for check in raw_checks(keys)),
        *table_checks(declaration, streams),
    ]
