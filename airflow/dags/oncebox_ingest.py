"""The ingest side: an Airflow DAG that runs oncebox's Node.js batch job with BashOperator.

Airflow's run_id is the oncebox run id and ti.try_number the attempt, so an Airflow retry is an oncebox
retry: try 2 resumes where try 1's committed checkpoint left off, and its emissions dedupe against try
1's. The job itself (examples/batch-ingest.ts) emits one "batch_ready" event per batch, with the
partition key "<prefix>batch-NNNN"; the forwarder turns those into Airflow asset events.

Params (set them when triggering the DAG):
- batches: how many batches the run writes;
- kill_on_try_1_before_batch: try 1 SIGKILLs itself before committing this batch (0: never), so that
  Airflow retries the task;
- fresh_file_on_retry: try 2 starts on a new outbox file (a retry on another machine) instead of try 1's;
- pause_ms: a pause after each batch, so that try 1 delivers some batches before it is killed.

The job reads ONCEBOX_ROOT (the checkout), ONCEBOX_SERVER (the oncebox server) and ONCEBOX_DATA (where
outbox files and batches go) from the environment of the Airflow worker.
"""
from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param

INGEST_COMMAND = """
set -eu
cd "$ONCEBOX_ROOT"
run_dir="$ONCEBOX_DATA/{{ run_id | replace(':', '_') | replace('+', '_') }}"
db="$run_dir/outbox.db"
{% if params.fresh_file_on_retry and ti.try_number > 1 %}db="$run_dir/outbox-try{{ ti.try_number }}.db"{% endif %}
kill_flag=""
{% if ti.try_number == 1 and params.kill_on_try_1_before_batch > 0 %}kill_flag="--kill-before-commit {{ params.kill_on_try_1_before_batch }}"{% endif %}
exec "${ONCEBOX_NODE:-node}" --import tsx examples/batch-ingest.ts \
  --db "$db" --server "$ONCEBOX_SERVER" --data "$run_dir/batches" \
  --producer airflow-ingest --run-id "{{ run_id }}" --attempt "{{ ti.try_number }}" \
  --batches "{{ params.batches }}" --partition-prefix "{{ params.partition_prefix }}" \
  --pause-ms "{{ params.pause_ms }}" $kill_flag
"""

with DAG(
    dag_id="oncebox_ingest",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    params={
        "batches": Param(5, type="integer", minimum=1),
        "partition_prefix": Param("", type="string"),
        "kill_on_try_1_before_batch": Param(0, type="integer", minimum=0),
        "fresh_file_on_retry": Param(False, type="boolean"),
        "pause_ms": Param(0, type="integer", minimum=0),
    },
    tags=["oncebox"],
):
    BashOperator(
        task_id="ingest",
        bash_command=INGEST_COMMAND,
        retries=1,
        retry_delay=timedelta(seconds=1),
        execution_timeout=timedelta(minutes=5),
    )
