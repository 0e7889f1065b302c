"""What one group member sends and gets back. The messages are defined with every other wire
message in reweighter.types (reweighter.wire derives their HTTP, gRPC and client forms); the
names stay importable from here, where the assembly's readers look for them."""

from ..types import MemberReason, MemberResult, MemberSubmission

__all__ = ["MemberReason", "MemberResult", "MemberSubmission"]
