"""``python -m kinesis_lake.cli``: the same as the ``kinesis-lake`` command."""

from kinesis_lake.cli import main

if __name__ == "__main__":  # imported, as a walk over the package's modules does: nothing
    main()
