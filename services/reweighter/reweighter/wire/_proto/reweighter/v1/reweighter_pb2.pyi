from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Embeddings(_message.Message):
    __slots__ = ("dim", "values")
    DIM_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    dim: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, dim: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: str
    def __init__(self, value: _Optional[str] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("id", "rewards", "completions", "embeddings", "answers", "prompt_key", "quality")
    ID_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_KEY_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    rewards: _containers.RepeatedScalarFieldContainer[float]
    completions: _containers.RepeatedScalarFieldContainer[str]
    embeddings: Embeddings
    answers: _containers.RepeatedCompositeFieldContainer[Answer]
    prompt_key: str
    quality: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[str] = ..., rewards: _Optional[_Iterable[float]] = ..., completions: _Optional[_Iterable[str]] = ..., embeddings: _Optional[_Union[Embeddings, _Mapping]] = ..., answers: _Optional[_Iterable[_Union[Answer, _Mapping]]] = ..., prompt_key: _Optional[str] = ..., quality: _Optional[_Iterable[float]] = ...) -> None: ...

class ReweightRequest(_message.Message):
    __slots__ = ("method", "params", "advantages", "groups", "advantage_params", "step")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_PARAMS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    method: str
    params: _struct_pb2.Struct
    advantages: str
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    advantage_params: _struct_pb2.Struct
    step: int
    def __init__(self, method: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., advantages: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ..., advantage_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class GroupStats(_message.Message):
    __slots__ = ("mean_similarity", "effective_size", "distinct_answers", "classes")
    MEAN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_SIZE_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    mean_similarity: float
    effective_size: float
    distinct_answers: int
    classes: int
    def __init__(self, mean_similarity: _Optional[float] = ..., effective_size: _Optional[float] = ..., distinct_answers: _Optional[int] = ..., classes: _Optional[int] = ..., **kwargs) -> None: ...

class GroupResult(_message.Message):
    __slots__ = ("id", "rewards", "advantages", "stats")
    ID_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    id: str
    rewards: _containers.RepeatedScalarFieldContainer[float]
    advantages: _containers.RepeatedScalarFieldContainer[float]
    stats: GroupStats
    def __init__(self, id: _Optional[str] = ..., rewards: _Optional[_Iterable[float]] = ..., advantages: _Optional[_Iterable[float]] = ..., stats: _Optional[_Union[GroupStats, _Mapping]] = ...) -> None: ...

class ReweightResponse(_message.Message):
    __slots__ = ("method", "model", "groups")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    method: str
    model: str
    groups: _containers.RepeatedCompositeFieldContainer[GroupResult]
    def __init__(self, method: _Optional[str] = ..., model: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[GroupResult, _Mapping]]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("inputs", "normalize")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedScalarFieldContainer[str]
    normalize: bool
    def __init__(self, inputs: _Optional[_Iterable[str]] = ..., normalize: _Optional[bool] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("model", "dim", "embeddings")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    dim: int
    embeddings: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, model: _Optional[str] = ..., dim: _Optional[int] = ..., embeddings: _Optional[_Iterable[float]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("model", "dim", "device", "version", "long_text", "methods", "advantages", "limits", "ready", "precision", "tenant")
    class MethodsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Struct
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
    class LimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LONG_TEXT_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    model: str
    dim: int
    device: str
    version: str
    long_text: str
    methods: _containers.MessageMap[str, _struct_pb2.Struct]
    advantages: _containers.RepeatedScalarFieldContainer[str]
    limits: _containers.ScalarMap[str, int]
    ready: bool
    precision: str
    tenant: str
    def __init__(self, model: _Optional[str] = ..., dim: _Optional[int] = ..., device: _Optional[str] = ..., version: _Optional[str] = ..., long_text: _Optional[str] = ..., methods: _Optional[_Mapping[str, _struct_pb2.Struct]] = ..., advantages: _Optional[_Iterable[str]] = ..., limits: _Optional[_Mapping[str, int]] = ..., ready: _Optional[bool] = ..., precision: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class Vector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class SubmitMemberRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "group_size", "reward", "completion", "embedding", "method", "params", "advantages", "timeout_s", "reuse_ids", "answer", "advantage_params", "step", "prompt_key", "quality")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    REUSE_IDS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_PARAMS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PROMPT_KEY_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    group_size: int
    reward: float
    completion: str
    embedding: Vector
    method: str
    params: _struct_pb2.Struct
    advantages: str
    timeout_s: float
    reuse_ids: bool
    answer: str
    advantage_params: _struct_pb2.Struct
    step: int
    prompt_key: str
    quality: float
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., group_size: _Optional[int] = ..., reward: _Optional[float] = ..., completion: _Optional[str] = ..., embedding: _Optional[_Union[Vector, _Mapping]] = ..., method: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., advantages: _Optional[str] = ..., timeout_s: _Optional[float] = ..., reuse_ids: _Optional[bool] = ..., answer: _Optional[str] = ..., advantage_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., step: _Optional[int] = ..., prompt_key: _Optional[str] = ..., quality: _Optional[float] = ...) -> None: ...

class MemberError(_message.Message):
    __slots__ = ("type", "code", "message", "field")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    type: str
    code: str
    message: str
    field: str
    def __init__(self, type: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class MemberResult(_message.Message):
    __slots__ = ("group_id", "member_id", "reward", "raw_reward", "advantage", "complete", "reason", "stats", "members", "error", "round")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    RAW_REWARD_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    reward: float
    raw_reward: float
    advantage: float
    complete: bool
    reason: str
    stats: GroupStats
    members: int
    error: MemberError
    round: int
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., reward: _Optional[float] = ..., raw_reward: _Optional[float] = ..., advantage: _Optional[float] = ..., complete: _Optional[bool] = ..., reason: _Optional[str] = ..., stats: _Optional[_Union[GroupStats, _Mapping]] = ..., members: _Optional[int] = ..., error: _Optional[_Union[MemberError, _Mapping]] = ..., round: _Optional[int] = ...) -> None: ...
