"""``python -m tasks``: regenerate ``tasks/README_TABLE.md`` from ``TASK_PARAMS``."""

from tasks.table import write_params_table

if __name__ == "__main__":
    print(f"wrote {write_params_table()}")
