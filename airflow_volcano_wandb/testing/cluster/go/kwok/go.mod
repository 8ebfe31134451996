module github.com/airflow-volcano-wandb/testing/kwok

go 1.26.0
