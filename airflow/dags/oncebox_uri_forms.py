"""Assets whose URIs Airflow stores in a normal form other than the one written: the forwarder's tests map
oncebox assets to them by URI as a user would write it (no path, upper-case scheme, trailing slashes)."""
from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

with DAG(dag_id="oncebox_uri_forms", schedule=None, catchup=False, tags=["oncebox"]):
    EmptyOperator(task_id="declare", outlets=[Asset(name="refunds", uri="ceo://refunds"), Asset(name="landed", uri="s3://bucket/landed/")])
