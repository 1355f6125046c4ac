"""mlms's domain models (pydantic) <-> their ``mlms.v2`` messages: the one place the two meet.

A message mirrors its model field for field, under the same names, so one walk over the
message's descriptor converts every pair (the caller names both):

- enum-like fields (``Literal`` strings, ``TraceLevel``) are proto enums whose values are
  ``<ENUM>_<VALUE>`` (``Layout.LAYOUT_CHW``, ``TraceLevel.TRACE_LEVEL_MODEL``);
- ``X | None`` is an ``optional`` scalar or a message field left unset; an unset optional
  field, an empty list or map, or a ``*_UNSPECIFIED`` enum takes the model's default where
  the model has one;
- datetimes are Timestamps (UTC); a list of lists is a repeated ``Int64List`` or
  ``DoubleList`` (a message whose one field is ``values``), and so is a list that may be None;
- a union is a message of one oneof: its member is chosen by the Python type of the value
  (``Value``, ``Labels``), or for a model by the member named as its ``kind`` (``Source``).

Decoding builds the model's plain data and validates it with the model, so a message is held
to the same rules as a stored record or a manifest file; a bad field is one InvalidArgument
line naming it. Encoding a field the message lacks is a programming error (TypeError): the
proto and the model have drifted apart.
"""

from __future__ import annotations

import functools
import re
import typing
from datetime import UTC
from enum import Enum
from typing import Any, TypeVar

from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    OneofDescriptor,
)
from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError

from mlms.errors import InvalidArgument
from mlms.reasons import one_line

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=Message)

_TIMESTAMP = "google.protobuf.Timestamp"
_UNSET = object()


def to_proto(model: BaseModel, message: type[P]) -> P:
    """``model`` as a ``message``."""
    given, rest = _split(message.DESCRIPTOR, model.model_dump())
    target = message(**given)
    _fill(target, rest)
    return target


def from_proto(message: Message, model: type[M], what: str) -> M:
    """The ``model`` a message holds; ``what`` names it in errors ("evaluation request")."""
    data = _data(message, model, what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(f"bad {what}: {one_line(exc)}") from None


# -- model -> message ---------------------------------------------------------------------------


def _split(descriptor: Descriptor, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data`` as what the message's constructor takes as it is (one call in C: scalars,
    repeated scalars, enums as numbers, timestamps as datetimes), and the rest for ``_fill``."""
    plan = _plan(descriptor)
    given: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for name, value in data.items():
        how = plan.get(name)
        if how is None or value is None:
            rest[name] = value  # _fill names a missing field; None leaves one unset
        elif how is _AS_IS:
            given[name] = value
        elif how is _FILLED:
            rest[name] = value
        else:
            given[name] = _scalar(how, value)
    return given, rest


_AS_IS = "as is"
_FILLED = "filled"


@functools.cache
def _plan(descriptor: Descriptor) -> dict[str, FieldDescriptor | str]:
    """Per field: given to the constructor as it is, as an enum's number (its descriptor), or
    filled afterwards."""
    plan: dict[str, FieldDescriptor | str] = {}
    for field in descriptor.fields:
        if field.message_type is not None:
            timestamp = not field.is_repeated and field.message_type.full_name == _TIMESTAMP
            plan[field.name] = _AS_IS if timestamp else _FILLED
        elif field.enum_type is not None:
            plan[field.name] = _FILLED if field.is_repeated else field
        else:
            plan[field.name] = _AS_IS
    return plan


def _fill(target: Message, data: dict[str, Any]) -> None:
    fields = target.DESCRIPTOR.fields_by_name
    for name, value in data.items():
        field = fields.get(name)
        if field is None:
            raise TypeError(
                f"{target.DESCRIPTOR.full_name} has no field {name!r}: add it to protos/mlms/v2"
            )
        if value is None:
            continue
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            container = getattr(target, name)
            for key, item in value.items():
                if entry.message_type is None:
                    container[key] = _scalar(entry, item)
                else:
                    _set_message(container[key], item)
        elif field.is_repeated:
            container = getattr(target, name)
            if field.message_type is None:
                container.extend(_scalar(field, item) for item in value)
            elif _is_plain(field.message_type):
                for item in value:
                    given, rest = _split(field.message_type, item)
                    _fill(container.add(**given), rest)
            else:
                for item in value:
                    _set_message(container.add(), item)
        elif field.message_type is None:
            setattr(target, name, _scalar(field, value))
        else:
            _set_message(getattr(target, name), value)


def _set_message(target: Message, value: Any) -> None:
    descriptor = target.DESCRIPTOR
    target.SetInParent()  # present even when every field is a default
    if descriptor.full_name == _TIMESTAMP:
        target.FromDatetime(value)
    elif _is_list(descriptor):
        target.values.extend(value)
    elif _is_union(descriptor):
        _set_member(target, value)
    else:
        _fill(target, value)


def _set_member(target: Message, value: Any) -> None:
    if value is None:
        return
    members = _oneofs(target.DESCRIPTOR)[0].fields
    if isinstance(value, dict):
        value = dict(value)
        kind = value.pop("kind")
        member = next(f for f in members if f.name == kind)
    else:
        member = next((f for f in members if _takes(f, value)), None)
        if member is None:
            raise TypeError(f"no member of {target.DESCRIPTOR.full_name} takes {value!r}")
    if member.message_type is None:
        setattr(target, member.name, value)
    else:
        _set_message(getattr(target, member.name), value)


def _takes(field: FieldDescriptor, value: Any) -> bool:
    if isinstance(value, bool):  # before int: a bool is an int too
        return field.type == FieldDescriptor.TYPE_BOOL
    if isinstance(value, int):
        return field.type == FieldDescriptor.TYPE_INT64
    if isinstance(value, float):
        return field.type == FieldDescriptor.TYPE_DOUBLE
    if isinstance(value, str):
        return field.type == FieldDescriptor.TYPE_STRING
    return isinstance(value, list | tuple) and bool(
        field.message_type and _is_list(field.message_type)
    )


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.enum_type is None:
        return value
    label = value.name if isinstance(value, Enum) else str(value)
    name = f"{_prefix(field.enum_type)}{label.upper()}"
    number = field.enum_type.values_by_name.get(name)
    if number is None:
        raise TypeError(f"{field.enum_type.full_name} has no value {name}: add it to protos/")
    return number.number


# -- message -> model data ----------------------------------------------------------------------


def _data(message: Message, model: type[BaseModel] | None, what: str) -> dict[str, Any]:
    """The plain data of ``model`` (None where the message has a field the model lacks, which
    the model then reports) that ``message`` holds."""
    fields = model.model_fields if model is not None else {}
    data: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        name = field.name
        value = getattr(message, name)
        info = fields.get(name)
        annotation = info.annotation if info is not None else None
        if field.is_repeated and not value and info is not None and not info.is_required():
            continue  # empty takes the default: a request's inputs are ["synthetic"] then
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            data[name] = {k: _value(entry, v, annotation, what) for k, v in value.items()}
        elif field.is_repeated:
            data[name] = [_value(field, item, annotation, what) for item in value]
        elif not field.has_presence or message.HasField(name):
            decoded = _value(field, value, annotation, what)
            if decoded is not _UNSET:
                data[name] = decoded
        elif info is not None and info.is_required() and _nullable(annotation):
            data[name] = None  # unset means None; a field with a default takes it instead
    return data


def _value(field: FieldDescriptor, value: Any, annotation: Any, what: str) -> Any:
    if field.enum_type is not None:
        return _enum_text(field, value, annotation, what)
    descriptor = field.message_type
    if descriptor is None:
        return value
    if descriptor.full_name == _TIMESTAMP:
        try:
            return value.ToDatetime(tzinfo=UTC)
        except (ValueError, OverflowError) as exc:  # seconds past year 9999
            raise InvalidArgument(f"bad {what}: {field.name}: {exc}") from None
    if _is_list(descriptor):
        return list(value.values)
    if _is_union(descriptor):
        chosen = value.WhichOneof(_oneofs(descriptor)[0].name)
        if chosen is None:
            return None
        member = descriptor.fields_by_name[chosen]
        if member.message_type is None or _is_list(member.message_type):
            return _value(member, getattr(value, chosen), annotation, what)
        return {
            **_data(getattr(value, chosen), _model_in(annotation, chosen), what),
            "kind": chosen,
        }
    return _data(value, _model_in(annotation), what)


def _enum_text(field: FieldDescriptor, number: int, annotation: Any, what: str) -> Any:
    enum = field.enum_type
    value = enum.values_by_number.get(number)
    if value is None:
        known = ", ".join(v.name for v in enum.values if not v.name.endswith("_UNSPECIFIED"))
        raise InvalidArgument(
            f"bad {what}: {field.name}: unknown {enum.name} {number}; expected one of: {known}"
        )
    if value.name.endswith("_UNSPECIFIED"):
        return _UNSET
    label = value.name.removeprefix(_prefix(enum))
    # The model's own spelling ("CHW"); a label the model does not list goes lower case and
    # is reported by the model's validation.
    spellings = {str(a).upper(): a for a in _walk(annotation) if isinstance(a, str)}
    return spellings.get(label, label.lower())


# -- descriptors and annotations ------------------------------------------------------------


# Descriptors never change: what they say is worked out once (each message converted asks
# it of every field).
@functools.cache
def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


@functools.cache
def _is_list(descriptor: Descriptor) -> bool:
    """``StringList``, ``Int64List``, ``DoubleList``: a message that only wraps a list."""
    return [f.name for f in descriptor.fields] == ["values"]


@functools.cache
def _is_plain(descriptor: Descriptor) -> bool:
    """A message of fields, filled from a dict (not a timestamp, a list or a union)."""
    return not (descriptor.full_name == _TIMESTAMP or _is_list(descriptor) or _is_union(descriptor))


@functools.cache
def _is_union(descriptor: Descriptor) -> bool:
    """A message whose fields are the members of its one oneof (``Value``, ``Source``)."""
    oneofs = _oneofs(descriptor)
    return len(oneofs) == 1 and len(oneofs[0].fields) == len(descriptor.fields)


@functools.cache
def _oneofs(descriptor: Descriptor) -> tuple[OneofDescriptor, ...]:
    # protoc gives each proto3 ``optional`` field a oneof of its own, named "_<field>".
    return tuple(oneof for oneof in descriptor.oneofs if not oneof.name.startswith("_"))


@functools.cache
def _prefix(enum: EnumDescriptor) -> str:
    """``TraceLevel`` -> ``TRACE_LEVEL_``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


def _walk(annotation: Any) -> list[Any]:
    """The types and ``Literal`` values inside an annotation, not looking inside models."""
    found: list[Any] = []
    for argument in typing.get_args(annotation):
        found.extend([argument] if not typing.get_args(argument) else _walk(argument))
    return found or [annotation]


def _nullable(annotation: Any) -> bool:
    return type(None) in _walk(annotation)


def _model_in(annotation: Any, kind: str | None = None) -> type[BaseModel] | None:
    """The model an annotation holds (``list[X]``, ``X | None``, ``dict[str, X]``); of a
    union of models, the one whose ``kind`` defaults to ``kind``."""
    models = [a for a in _walk(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    if kind is not None:
        models = [m for m in models if getattr(m.model_fields.get("kind"), "default", None) == kind]
    return models[0] if len(models) == 1 else None
