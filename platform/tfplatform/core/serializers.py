from typing import Any

from rest_framework import serializers


class StrictInputSerializer(serializers.Serializer):
    """Rejects fields it does not know, so typos and mass assignment fail loudly."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) or hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class QuerySerializer(serializers.Serializer):
    """A query string's parameters. DRF reads a blank form value of an optional field as left
    out; a blank parameter is refused here instead, so `?state=` is never "every state"."""

    def validate(self, attrs: Any) -> Any:
        data = self.initial_data
        names: list[str] = list(self.fields)
        blank = sorted(name for name in names
                       if hasattr(data, "getlist") and "" in data.getlist(name))
        if blank:
            raise serializers.ValidationError(
                {name: ["Give a value, or leave the parameter out."] for name in blank})
        return super().validate(attrs)


class JSONObjectField(serializers.JSONField):
    """A JSON object, sent either as JSON or (in multipart uploads) as a JSON-encoded string."""

    default_error_messages = {
        "not_object": "Must be a JSON object.",
        "nul": "Must not hold a NUL character.",
    }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str | bytes):
            self.binary = True
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        if _holds_nul(value):  # PostgreSQL's jsonb refuses \u0000: a 500 otherwise
            self.fail("nul")
        return value


class TextSlugRelatedField(serializers.SlugRelatedField):
    """A slug lookup that checks the text first: a NUL character or an over-long value is a
    field error, not a database error."""

    def __init__(self, *, max_length: int, **kwargs: Any) -> None:
        self.max_length = max_length
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or "\x00" in data or len(data) > self.max_length:
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:100])
        return super().to_internal_value(data)


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False
