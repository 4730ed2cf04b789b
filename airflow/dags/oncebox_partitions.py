"""The downstream side: partitioned DAGs scheduled on the assets events are posted to.

PartitionedAssetTimetable with its default identity mapper creates one DAG run per asset event's
partition key. Airflow has no idempotency key on asset events, so a duplicate event for a partition
creates a second run for it; oncebox's forwarder is what keeps it at one.

The second DAG is the control in the demo and the tests: it is scheduled on an asset that a plain client
posts the same events to, through the same faults, retrying without looking first.
"""
from __future__ import annotations

from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

ONCEBOX_BATCHES = Asset(name="oncebox_batches", uri="oncebox://orders/batch_ready")
PLAIN_BATCHES = Asset(name="plain_batches", uri="plain://orders/batch_ready")


@task
def process_partition(dag_run=None):
    print(f"processing partition {dag_run.partition_key}")


for dag_id, asset in [("oncebox_partition_consumer", ONCEBOX_BATCHES), ("plain_partition_consumer", PLAIN_BATCHES)]:
    with DAG(dag_id=dag_id, schedule=PartitionedAssetTimetable(assets=asset), catchup=False, tags=["oncebox"]):
        process_partition()
