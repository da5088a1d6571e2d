"""GET /v1/tasks, GET /v1/tasks/{id}, GET /v1/tasks/{id}/prompt: anonymous reads of the judged problems."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from reference import Task, all_tasks
from service import crud
from service.api import schemas
from service.api.deps import ReadSessionDep, SettingsDep, TaskDep
from service.api.errors import responses
from sandbox.shared import languages
from service.core.config import Settings
from service.prompts import LANGUAGES as PROMPT_LANGUAGES
from service.prompts import generation_prompt

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


def judged_device(settings: Settings) -> str:
    """"cuda" where this host's worker judges on a GPU (JUDGE_DEVICES, `auto`: every visible GPU), else "cpu":
    the device type that decides the judged shape (sandbox/pipeline.py: the official shape on a GPU, the
    task's CPU size on the CPU)."""
    return "cuda" if any(device.startswith("cuda") for device in settings.device_list()) else "cpu"


def _summary(task: Task, device: str) -> dict:
    return {"id": task.id.value, "title": task.title, "kernelbench_id": task.kernelbench_id,
            "official_shape": list(task.official_shape),
            "judged_shape": list(task.official_shape if device == "cuda" else task.cpu_shape),
            "judged_device": device,
            "variant": "forward" if task.training is None else "training",
            "forward_task": task.training.forward_task.value if task.training else None,
            "languages": [language.id for language in languages.available()]}


@router.get("", response_model=list[schemas.TaskSummary], summary="List the tasks")
def list_tasks(settings: SettingsDep) -> list[schemas.TaskSummary]:
    device = judged_device(settings)
    return [schemas.TaskSummary(**_summary(t, device)) for t in all_tasks()]


@router.get("/{task_id}", response_model=schemas.TaskDetail, summary="One task: problem, shapes, tolerance, baselines",
            responses=responses(404, 422, 503))
def read_task(task: TaskDep, session: ReadSessionDep, settings: SettingsDep) -> schemas.TaskDetail:
    """The exact KernelBench problem module, the shapes judged (official, CPU, extra), the tolerance and why,
    the forbidden operators, and per GPU model the latest measured baselines (PyTorch eager and torch.compile)
    and speed-of-light (the task's minimal bytes over the card's measured bandwidth)."""
    baselines = crud.device_baselines(session, task.id.value)
    return schemas.TaskDetail(
        **_summary(task, judged_device(settings)),
        problem_source=task.problem_source,
        shapes=schemas.Shapes(official=list(task.official_shape), cpu=list(task.cpu_shape),
                              extra=[list(s) for s in task.extra_shapes],
                              cpu_extra=[list(s) for s in task.cpu_extra_shapes]),
        distributions=list(task.distributions),
        tolerance=schemas.ToleranceOut(atol=task.tolerance.atol, rtol=task.tolerance.rtol, why=task.tolerance.why),
        forbidden_operators=sorted(task.forbidden_aten_ops),
        requires_custom_kernel=task.requires_custom_kernel,
        min_bytes=task.min_bytes(task.official_shape),
        baselines=baselines,
        gradient_tolerance=schemas.ToleranceOut(**vars(task.training.gradient_tolerance)) if task.training else None,
        training_statement=task.training.statement if task.training else None,
    )


@router.get("/{task_id}/prompt", response_class=PlainTextResponse, summary="A KernelBench-style generation prompt",
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **responses(404, 422)})
def task_prompt(task: TaskDep, language: Annotated[Literal[PROMPT_LANGUAGES], Query(
        description="The kernel language the example is written in and the prompt asks for: cuda, triton, cute "
                    "and tilelang for a GPU; cpp, C++ built with torch's cpp extension, for the CPU.")] = "cuda",
                ) -> str:
    """The one-shot prompt KernelBench gives an LLM (instruction, an elementwise-add example, the problem),
    plus one paragraph on how this judge checks the answer. Any of the languages a judge knows is given (see
    `languages` in GET /v1/tasks for the GPU languages this host judges); `cpp` is the CPU's own, and its prompt
    names the CPU size the task is judged at there (`judged_shape` of a CPU host)."""
    return generation_prompt(task, language)
