"""sigma.plan: the best parallel layouts for a model on a set of devices."""

import json
import os

from . import _sigma
from .errors import InvalidArgumentError


def plan(request, top=0):
    """The planner's answer for a ``sigma-plan`` request (docs/parallel.md):
    a YAML file's path or YAML text naming the model, the devices, and
    optionally the framework, efficiency and search space. Returns a dict:
    ``plans`` (best first: ``layout``, ``step_s``, ``tokens_per_s``,
    ``mfu``, ``memory_gib``, ``breakdown_s``; empty when nothing fits),
    ``model_flops_per_token``, ``search_s``. ``top``: how many plans (0: the
    request's ``search.top``, else 5). A malformed request raises
    :class:`sigma.InvalidArgumentError` naming the file, line and key."""
    name = "(plan request)"
    if "\n" not in request and os.path.exists(request) and not os.path.isfile(request):
        raise InvalidArgumentError(f"plan: request '{request}' is not a regular file")
    if "\n" not in request and os.path.isfile(request):
        name = request
        with open(request, encoding="utf-8") as f:
            request = f.read()
    return json.loads(_sigma.plan(request, name, int(top)))
