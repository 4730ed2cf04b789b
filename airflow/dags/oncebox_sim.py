"""The asset the whole-system simulation (sim/) forwards each tenant's summaries to. No DAG is scheduled on
it: the simulation checks what reaches Airflow, once per event, and starts no downstream runs."""
from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

with DAG(dag_id="oncebox_sim_assets", schedule=None, catchup=False, tags=["oncebox"]):
    EmptyOperator(task_id="declare", outlets=[Asset(name="sim_forwarded", uri="oncebox://sim/forwarded")])
