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
   kernel takes the keyword `ctx` (a `reweighter.methods.context.MethodContext`).
2. One entry in `CATALOG` (`reweighter/methods/catalog.py`):
   `MethodSpec("<name>", "<one line: what it does>", params="reweighter.methods.<name>:<Model>",
   kernel="reweighter.methods.<name>:apply", needs_similarity=<bool>)`.
3. docs/methods.md: a row in its table of methods (name, parameters by wire name, what it
   does) and a section with the formula and its source.

From the catalogue the method gets: the HTTP schema (method enum, `params`), `/v1/info` and the
gRPC `Info`, a `reweighter reweight --<param>` flag per parameter, its metrics label, the
trainer config's check, and its parameters' errors naming the field on both transports.

Add an HTTP route:

1. Its request and response models in `api/http/schemas.py` (requests with `extra="forbid"`),
   with their conversions to and from the engine's types (`reweighter.types`).
2. The route in `api/http/router.py` (`build_router`), or a router of its own in `api/http/`
   included by `create_app`: declare `response_model=`, and run the body inside
   `with metrics.track("http", "<last segment of its path>", <method name or "">)`.
3. A method on the HTTP client (`client/http.py`) that sends the request model's JSON and
   parses the answer with the same response model.

From the app's routes the route gets: the field names its schema errors use
(`api/http/routes.py`: every field of its request models, nested ones included), its metrics
label for requests refused before the handler, and its OpenAPI entry.
"""

__version__ = "0.1.0"
