"""Which earlier W&B run a try's fresh job continues, and the record that tells the next try.

The decision is ``job.resume``'s (pure); this part keeps its record in the task state store and
makes the one fresh read that tells a kill in the triggerer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowTaskTimeout
from airflow_volcano_wandb.exceptions import JobTimeoutError
from airflow_volcano_wandb.job import resume, submission
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.ownership import intent_of, wandb_run_of
from airflow_volcano_wandb.job.resume import Resumption, RunRecord
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wait import diagnostics

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

#: The XCom of a try that resumed an earlier try's W&B run: that try's intent.
XCOM_RESUMED_FROM_INTENT = "resumed_from_intent"
#: The XCom of a resumed try: the step its trainer said it continued after.
XCOM_RESUMED_FROM_STEP = "resumed_from_step"
#: The XCom of a resumed try: the GPU-seconds its resume saved (the seconds of training its
#: checkpoint holds, as the trainer said, times the job's GPUs).
XCOM_RESUME_SAVED_GPU_SECONDS = "resume_saved_gpu_seconds"
#: In a resumed try's return value (and the W&B run's ``airflow`` config): the checkpoint its
#: trainer loaded.
RESUMED_FROM_CHECKPOINT = "resumed_from_checkpoint"
#: How much of the master's log is searched for the trainer's resume line (it is printed
#: before the first step, so within its first lines).
RESUME_LINE_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class ResumePolicy:
    """Resuming an interrupted training on its W&B run (docs/trainer.md, "Checkpoints")."""

    resume_on: str | Sequence[str] | None = option(
        resume.DEFAULT_RESUME_ON,
        """the endings of a try after which the next try's fresh job continues that try's
        W&B run instead of starting one of its own: the same run id (so the same checkpoint
        directory, ``/checkpoints/<run id>``, or W&B artifact, where ``AVW_RESUME_FROM=latest``
        finds the earlier try's newest checkpoint) and ``WANDB_RESUME=must`` (``allow`` after
        a kill or deletion, which may come before the trainer started its run). Any of
        ``preempted`` (a rank preempted or evicted: node pressure, a drain, a lost node),
        ``killed`` (the task was killed, cleared or marked failed while its job ran, and the
        job was deleted), ``deleted`` (someone else deleted the job), ``timeout``
        (``execution_timeout``), ``trainer_failure`` (an exit code, an OOM kill, a crash loop,
        a stall, a job Volcano failed); a list, or a comma-separated string. Default
        ``("preempted", "killed")``: a trainer's own failure starts afresh unless the DAG says
        so. A run stopped from W&B, a gang never placed, or a success are never resumed. Needs
        Airflow 3.3's task state store (before it, every try starts a run).""",
        templated=True,
        check=resume.resume_on,  # a bad cause fails the DAG's parse
    )
    log: Any = None

    def interrupted_run(self, hook: VolcanoHook, store: Any, try_number: int) -> Resumption | None:
        """The interrupted try's run this try's fresh job continues, if it does (the job is
        then rendered again, under that run's id)."""
        policy = resume.resume_on(self.resume_on)  # checked already, when the part was built
        if not policy or try_number <= 1:
            return None
        if store is None:
            self.log.info(
                "resume_on needs Airflow 3.3's task state store: this try's job starts a W&B "
                "run of its own"
            )
            return None
        record = RunRecord.from_store(_read(store, self.log))
        if record is None:
            return None
        ref = submission.recall(store, self.log)
        uid = ref["uid"] if ref is not None else None  # recall: None or a whole reference
        unreported = record.cause is None and ref is not None and uid == record.uid
        gone = unreported and ref is not None and _gone(hook, ref, self.log)
        cause = resume.interrupted_by(record, uid, gone)
        resumed = resume.resume_of(record, cause, policy)
        if resumed is not None and gone and ref is not None:
            # A killed job's ranks may still be saving on SIGTERM, into the run and the
            # checkpoint directory the resumed job takes over: never two writers at once.
            _wait_gone(hook, ref, self.log)
        return resumed

    def record_timeout(self, store: Any, job: Mapping[str, str] | None, exc: BaseException) -> None:
        """A sync wait cut by ``execution_timeout``: tell the next try (a kill, which also ends
        a sync wait, is told by the job being gone)."""
        if job is not None and isinstance(exc, AirflowTaskTimeout):
            self.record_cause(store, job["uid"], JobTimeoutError(str(exc)))

    def record_run(self, store: Any, job: Mapping[str, Any]) -> None:
        """Remember the run the job this try waits on writes to (its outcome not yet known)."""
        meta, run_id, intent = job["metadata"], wandb_run_of(job), intent_of(job)
        if store is None or run_id is None or intent is None:
            return  # a run id that is no label value: not resumed (the run is the DAG's own)
        previous = RunRecord.from_store(_read(store, self.log))
        if previous is not None and previous.uid == meta["uid"]:
            return  # a reattach: the record stands
        _write(store, RunRecord(run_id, intent, meta["uid"]), self.log)

    def record_cause(self, store: Any, uid: str, error: BaseException | None) -> None:
        """Tell the next try how the job ``uid`` ended (``error``: None when it succeeded)."""
        record = RunRecord.from_store(_read(store, self.log)) if store is not None else None
        if record is not None and record.uid == uid:
            cause = resume.cause_of(error)
            _write(store, RunRecord(record.run_id, record.intent, uid, cause), self.log)

    def say_resumed(
        self, resumed: Resumption | None, job: Mapping[str, Any], ti: Any, run: dict[str, Any]
    ) -> None:
        """Log and publish that the job continues the earlier run ``resumed``, when it does (a
        reattach keeps its own)."""
        if resumed is None or wandb_run_of(job) != resumed.run_id:
            return
        if intent_of(job) == resumed.from_intent:
            return
        self.log.info(
            "Resuming W&B run %s (try %s ended by %s); the trainer resumes from the run's "
            "latest checkpoint (its directory /checkpoints/%s, or with checkpoint_artifact "
            "its W&B artifact)",
            resumed.run_id,
            resumed.from_intent,
            resumed.cause,
            resumed.run_id,
        )
        ti.xcom_push(key=XCOM_RESUMED_FROM_INTENT, value=resumed.from_intent)
        run[XCOM_RESUMED_FROM_INTENT] = resumed.from_intent

    @staticmethod
    def resumed_job_name(
        resumed: Resumption | None, body: Mapping[str, Any], intent: int
    ) -> str | None:
        """The name of the job that resumes the interrupted try's run ``resumed``
        (``resume.resumed_job_name``: never the interrupted job's); None when ``intent``'s job
        resumes nothing."""
        if resumed is None or intent == resumed.from_intent:
            return None
        return resume.resumed_job_name(body["metadata"]["name"], intent)

    def say_resumed_step(
        self, hook: VolcanoHook, job: Mapping[str, Any] | None, ti: Any, run: Mapping[str, Any]
    ) -> dict[str, Any]:
        """For a resumed try's finished job: the step its trainer continued after and the
        GPU-seconds that saved, read from the master's log, logged and published (``{}``: not
        resumed, or not said)."""
        if job is None or run.get(XCOM_RESUMED_FROM_INTENT) is None:
            return {}
        meta = job["metadata"]
        try:
            master = diagnostics.master_pod(
                hook.list_job_pods(meta["name"], meta["namespace"]), job
            )
            head = (
                ""
                if master is None
                else hook.read_pod_log(
                    master["metadata"]["name"], meta["namespace"], limit_bytes=RESUME_LINE_BYTES
                )
            )
        except Exception as exc:  # a report, never a reason to fail
            self.log.warning("Could not read the master's log for its resume step (%s)", exc)
            return {}
        said = resume.resumed_step(head)
        if said is None:
            self.log.info("The trainer did not say which step it resumed from")
            return {}
        ti.xcom_push(key=XCOM_RESUMED_FROM_STEP, value=said.step)
        told = {XCOM_RESUMED_FROM_STEP: said.step, RESUMED_FROM_CHECKPOINT: said.checkpoint}
        if said.trained_seconds is None:  # a trainer of the older contract
            self.log.info(
                "Resumed from step %s (checkpoint %s): the earlier try's steps were not trained "
                "again",
                said.step,
                said.checkpoint,
            )
            return told
        gpus = resume.job_gpus(job)
        saved = resume.saved_gpu_seconds(said.trained_seconds, gpus)
        self.log.info(
            "Resumed from step %s (checkpoint %s): %g s of training on %s GPUs not repeated: "
            "%g GPU-seconds saved",
            said.step,
            said.checkpoint,
            said.trained_seconds,
            gpus,
            saved,
        )
        ti.xcom_push(key=XCOM_RESUME_SAVED_GPU_SECONDS, value=saved)
        return {**told, XCOM_RESUME_SAVED_GPU_SECONDS: saved}


def _gone(hook: VolcanoHook, ref: Mapping[str, str], task_log: Any) -> bool:
    """Whether a fresh read shows the remembered job gone or going (its name free, another
    submission's, or being deleted); a read that fails is no proof: not gone."""
    try:
        job = hook.get_job(ref["name"], ref["namespace"])
    except Exception as exc:
        task_log.warning("Could not read job %s (%s); not resuming its run", ref["name"], exc)
        return False
    if job is None or job["metadata"].get("uid") != ref["uid"]:
        return True
    return interpret(job).ending is Ending.DELETED


#: Seconds a resumed try waits for the killed job it continues to be gone (its pods stopped).
DYING_JOB_WAIT = 300.0


def _wait_gone(hook: VolcanoHook, ref: Mapping[str, str], task_log: Any) -> None:
    """Wait until the very job ``ref`` names is gone (a foreground delete keeps it until its
    pods are); a job of another uid under the name is not it."""
    deadline = time.monotonic() + DYING_JOB_WAIT
    said = False
    while (job := hook.get_job(ref["name"], ref["namespace"])) is not None:
        if job["metadata"].get("uid") != ref["uid"]:
            return
        if not said:
            task_log.info("Waiting for the killed job %s to stop before resuming", ref["name"])
            said = True
        if time.monotonic() > deadline:
            raise AirflowException(
                f"Volcano job {ref['namespace']}/{ref['name']} was still being deleted after "
                f"{DYING_JOB_WAIT:.0f}s; not starting a second writer of its W&B run"
            )
        time.sleep(1.0)


def _read(store: Any, task_log: Any) -> Any:
    try:
        return store.get(resume.STATE_STORE_KEY)
    except Exception as exc:  # the store is an optimisation: never fail the task for it
        task_log.warning("Could not read the task state store (%s); not resuming", exc)
        return None


def _write(store: Any, record: RunRecord, task_log: Any) -> None:
    try:
        store.set(resume.STATE_STORE_KEY, record.to_store())
    except Exception as exc:
        task_log.warning("Could not write the task state store (%s); no resume follows", exc)
