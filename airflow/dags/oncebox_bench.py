"""Assets for `npm run bench`: the forwarder and the plain client post to these, and no DAG is scheduled
on them, so that the benchmark measures the posts and not the downstream runs they would start."""
from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

with DAG(dag_id="oncebox_bench_assets", schedule=None, catchup=False, tags=["oncebox"]):
    EmptyOperator(task_id="declare", outlets=[Asset(name="bench_forwarded", uri="oncebox://bench/forwarded"), Asset(name="bench_plain", uri="oncebox://bench/plain")])
