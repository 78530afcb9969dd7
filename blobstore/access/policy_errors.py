"""The one error a policy document can raise: `MalformedPolicy`, carrying S3's message.

The gateway answers it as S3 does for PutBucketPolicy (`400 MalformedPolicy` with the
message); the admin commands print the message for an identity policy. The messages are
S3's own where S3 has one, so a client matching on them behaves as against S3.
"""

from __future__ import annotations

INVALID_JSON = "This policy contains invalid Json"
FIRST_BYTE = "Policies must be valid JSON and the first byte must be '{'"
TOO_LARGE = "Policy exceeds the maximum allowed document size."
INVALID_VERSION = "The policy must contain a valid version string"
MISSING_STATEMENT = "Missing required field Statement"
EMPTY_STATEMENT = "Could not parse the policy: Statement is empty!"
DUPLICATE_SID = "Statement IDs (SID) in a single policy must be unique."
INVALID_SYNTAX = "Invalid policy syntax."
MISSING_EFFECT = "Missing required field Effect"
MISSING_ACTION = "Missing required field Action"
MISSING_RESOURCE = "Missing required field Resource"
MISSING_PRINCIPAL = "Missing required field Principal"
IDENTITY_PRINCIPAL = "Policy document should not specify a principal."
INVALID_PRINCIPAL = "Invalid principal in policy"
INVALID_ACTION = "Policy has invalid action"
INVALID_RESOURCE = "Policy has invalid resource"
ACTION_RESOURCE_MISMATCH = "Action does not apply to any resource(s) in statement"
INVALID_CONDITION_VALUE = "Invalid Condition value"


class MalformedPolicy(ValueError):
    """A policy document S3 would refuse; `message` is what S3 answers."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def unknown_field(name: str) -> MalformedPolicy:
    return MalformedPolicy(f"Unknown field {name}")


def invalid_effect(effect: object) -> MalformedPolicy:
    return MalformedPolicy(f"Invalid effect: {effect}")


def invalid_condition_type(operator: str) -> MalformedPolicy:
    return MalformedPolicy(f"Invalid Condition type : {operator}")
