"""What the holder of a bearer token may do on a cluster, as its API server says.

`may(client, ...)` sends a SelfSubjectAccessReview with a client that carries only the
caller's token (`ClusterClient.as_bearer`): the API server authenticates the token and
answers for its holder, so this process needs no right to review others (no
TokenReview or SubjectAccessReview), and a token the server does not accept is told
apart (`NotAuthenticated`) from one whose holder is refused.
"""

from __future__ import annotations

from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind, status_of

SELF_SUBJECT_ACCESS_REVIEWS = ResourceKind("authorization.k8s.io", "v1",
                                           "selfsubjectaccessreviews", namespaced=False)


class NotAuthenticated(Exception):
    """The API server did not accept the token."""


async def may(client: ClusterClient, *, verb: str, group: str, resource: str,
              namespace: str, name: str) -> bool:
    """Whether the token `client` carries may `verb` the object; NotAuthenticated when
    the server does not know the token."""
    try:
        review = await Resource(client, SELF_SUBJECT_ACCESS_REVIEWS).create({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group,
                                            "resource": resource, "namespace": namespace,
                                            "name": name}}})
    except Exception as error:
        if status_of(error) == 401:
            raise NotAuthenticated(str(error)) from error
        raise
    return bool((review.get("status") or {}).get("allowed"))
