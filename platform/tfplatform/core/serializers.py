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


class JSONObjectField(serializers.JSONField):
    """A JSON object, sent either as JSON or (in multipart uploads) as a JSON-encoded string."""

    default_error_messages = {"not_object": "Must be a JSON object."}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str | bytes):
            self.binary = True
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        return value
