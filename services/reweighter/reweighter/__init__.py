"""Reweighter: diversity-aware reward reweighting for GRPO-style training.

The map of the code is docs/architecture.md. Two recipes, each complete: following one alone
gives a working method or route (tests/service/test_recipes.py follows both and shows that
each step is needed).

Add a reweighting method (three places, nothing else):

1. `reweighter/methods/<name>.py`: its parameter model, a pydantic `BaseModel` with
   `ConfigDict(extra="forbid")` and one described `Field` per parameter (the wire name is the
   field's alias, or its name), and its batched kernel
   `apply(rewards [B, G], sim [B, G, G] | None, mask [B, G] | None, params)` returning
   (new rewards [B, G], λ per group [B] or None). The engine has checked the input and parsed
   `params` with the model; items outside `mask` must come out 0. A method that needs answer classes
   or outcome memory lists them in its entry (`needs=("classes",)` / `("memory",)`) and its
   kernel takes the keyword `ctx` (a `reweighter.methods.context.MethodContext`). A method that
   acts after the advantage estimator too (outcome_ucb: the paper adds its bonus to the
   advantage) names that kernel in its entry's `after` (`MethodSpec.after`). A function of the
   method's name for direct Python callers is optional (the built-in ones have one each,
   checking its input and calling the same formula as `apply`).
2. One entry in `CATALOG` (`reweighter/methods/catalog.py`):
   `MethodSpec("<name>", "<one line: what it does>", params="reweighter.methods.<name>:<Model>",
   kernel="reweighter.methods.<name>:apply", needs_similarity=<bool>)`.
3. docs/methods.md: a row in its table of methods (name, parameters by wire name, what it
   does) and a section with the formula and its source.

From the catalogue the method gets: the HTTP schema (method enum, `params`), `/v1/info` and the
gRPC `Info`, a `reweighter reweight --<param>` flag per parameter, its metrics label, the
trainer config's check, and its parameters' errors naming the field on both transports.

Add a route (a request/answer call, served over HTTP and gRPC and reached through `connect()`;
five files by hand, three generated):

1. Its request and result messages in `reweighter/types.py`: frozen dataclasses whose fields
   are declared with `wire("what it is", default)` (reweighter.wire derives the pydantic models,
   the client's body and the protobuf mapping from them).
2. The RPC and the same messages (same field names) in proto/reweighter/v1/reweighter.proto,
   then `python scripts/gen_proto.py` (rewrites the three stubs in `reweighter/wire/_proto`).
3. The engine coroutine that answers it, `async def a<name>(self, request) -> Result`, in
   `reweighter/engine/core.py` (judging the request, each error naming its field), and its line
   in `reweighter/engine/surface.py`.
4. One entry in `CALLS` (`reweighter/wire/calls.py`): `Call("<name>", Request, Result, "<doc>")`.

From the entry the route gets: `POST /v1/<name>` with its models, OpenAPI entry, field-named
schema errors and metrics label; the gRPC method `<Name>` with its status codes; the shutdown
drain; and `call("<name>", request)` on every client (HTTP, gRPC, in process).
"""

__version__ = "0.1.0"
