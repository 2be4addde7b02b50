"""Settings mistakes as people read them: one line per problem naming the variable, its value,
what is wrong and the form expected, e.g. ``OPSGATE_ANALYSIS_BEFORE_S=120: out of range;
expected a whole number of seconds from 300 to 604800``. Never a traceback, never a secret, never
a URL's credentials."""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import AliasChoices, BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsError

from core.errors import OpsgateError
from core.redact import url_without_credentials

_SHOWN_LIMIT = 80
_WHAT = {
    "literal_error": "not one of the choices",
    "int_parsing": "not a whole number",
    "int_from_float": "not a whole number",
    "int_type": "not a whole number",
    "float_parsing": "not a number",
    "float_type": "not a number",
    "finite_number": "not a finite number",
    "bool_parsing": "not true or false",
    "greater_than": "out of range",
    "greater_than_equal": "out of range",
    "less_than": "out of range",
    "less_than_equal": "out of range",
    "string_too_long": "too long",
    "string_type": "not text",
    "list_type": "not a list",
    "dict_type": "not an object",
}


class InvalidSettings(OpsgateError):
    """A setting that cannot be used; ``problems`` holds one line for each."""

    code = "invalid_settings"

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems), problems=list(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Expect:
    """Pydantic metadata naming a setting's form for people, where its type does not say it."""

    form: str


def invalid_settings(settings: type[BaseModel], error: ValidationError | SettingsError,
                     ) -> InvalidSettings:
    """``error`` (pydantic's, or pydantic-settings' when a source could not be read) as
    ``InvalidSettings``."""
    if isinstance(error, ValidationError):
        return InvalidSettings([_problem(settings, details)
                                for details in error.errors(include_url=False)])
    found = re.search(r'field "([^"]+)"', str(error))
    name = found.group(1) if found else ""
    info = settings.model_fields.get(name)
    variable = _variable(settings, name, info) if info else "a setting"
    cause = f" ({error.__cause__})" if error.__cause__ else ""
    expected = f"; expected {_expected(name, info)}" if info else ""
    return InvalidSettings([f"{variable}: cannot be read{cause}{expected}"])


def _problem(settings: type[BaseModel], details: ErrorDetails) -> str:
    name, *inner = [str(part) for part in details["loc"]] or [""]
    info = settings.model_fields.get(name)
    if info is None:
        return f"{name}: {_what(details)}"
    where = _variable(settings, name, info) + "".join(f"[{part}]" for part in inner)
    return (f"{where}={_shown(info, details['input'])}: {_what(details)}; "
            f"expected {_expected(name, info)}")


def _variable(settings: type[BaseModel], name: str, info: FieldInfo) -> str:
    """The environment variable a person sets for field ``name``."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        upper = [str(choice) for choice in alias.choices if str(choice).isupper()]
        if upper:
            return upper[0]
    prefix = str(settings.model_config.get("env_prefix", ""))
    return f"{prefix}{name}".upper()


def _what(details: ErrorDetails) -> str:
    if details["type"] == "value_error":
        return str(details["msg"]).removeprefix("Value error, ")
    known = _WHAT.get(details["type"])
    if known is not None:
        return known
    message = str(details["msg"])
    return message[:1].lower() + message[1:]


def _shown(info: FieldInfo, value: Any) -> str:
    """The value as it may be printed: secrets hidden, URLs without credentials, cut short."""
    if _is_secret(info.annotation):
        return "<hidden>"
    text = value if isinstance(value, str) else repr(value)
    text = url_without_credentials(text)
    if len(text) > _SHOWN_LIMIT:
        text = text[:_SHOWN_LIMIT - 1] + "…"
    return text if text and text.isprintable() and " " not in text else repr(text)


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


def _expected(name: str, info: FieldInfo) -> str:
    """The form a setting takes, from its declaration."""
    annotation = info.annotation
    told = [item for item in (*info.metadata, *_union_metadata(annotation))
            if isinstance(item, Expect)]
    if told:  # the outermost says it best (a list of variable names over a list of names)
        optional = " (or unset)" if type(None) in typing.get_args(annotation) else ""
        return told[-1].form + optional
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    optional = " (or unset)" if type(None) in typing.get_args(annotation) else ""
    base = args[0] if len(args) == 1 and typing.get_origin(annotation) is not None \
        and typing.get_origin(annotation) is not typing.Literal else annotation
    if typing.get_origin(base) is typing.Literal:
        return "one of " + ", ".join(str(choice) for choice in typing.get_args(base))
    if base is bool:
        return "true or false"
    if base in (int, float):
        return _number_form(name, info, whole=base is int) + optional
    if base is str:
        return _text_form(info) + optional
    if _is_secret(annotation):
        return "a secret"
    return f"a value of type {getattr(base, '__name__', base)}{optional}"


def _union_metadata(annotation: Any) -> list[Any]:
    """Metadata of ``Annotated[...] | None``, which pydantic leaves inside the union."""
    return [item for arg in typing.get_args(annotation)
            if typing.get_origin(arg) is typing.Annotated for item in arg.__metadata__]


def _number_form(name: str, info: FieldInfo, *, whole: bool) -> str:
    what = ("a whole number" if whole else "a number") + (" of seconds" if name.endswith("_s")
                                                           else "")
    low: Any = None
    high: Any = None
    above = False
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Gt):
            low, above = item.gt, True
        elif isinstance(item, annotated_types.Le):
            high = item.le
    if low is None:
        return what if high is None else f"{what} of at most {high:g}"
    if above:
        return f"{what} above {low:g}" + ("" if high is None else f" and at most {high:g}")
    return f"{what} of at least {low:g}" if high is None else f"{what} from {low:g} to {high:g}"


def _text_form(info: FieldInfo) -> str:
    for item in info.metadata:
        if isinstance(item, annotated_types.MaxLen):
            return f"text of at most {item.max_length} characters"
    return "text"
