"""The downstream side: a partitioned DAG scheduled on the asset the forwarder posts to.

PartitionedAssetTimetable with its default identity mapper creates one DAG run per asset event's
partition key. Airflow has no idempotency key on asset events, so a duplicate event for a partition
would create a second run for it; oncebox's forwarder is what keeps it at one.
"""
from __future__ import annotations

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

ONCEBOX_BATCHES = Asset(name="oncebox_batches", uri="oncebox://orders/batch_ready")

with DAG(
    dag_id="oncebox_partition_consumer",
    schedule=PartitionedAssetTimetable(assets=ONCEBOX_BATCHES),
    catchup=False,
    tags=["oncebox"],
):

    @task
    def process_partition(dag_run=None):
        print(f"processing partition {dag_run.partition_key}")

    process_partition()
