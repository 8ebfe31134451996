"""The Training tab and page: a plugin of Airflow's API server (Airflow 3.1 and later place it on
the task instance page and in the navigation; docs/training-tab.md)."""
