"""What the k8shim would derive from a pod, derived from a recovered allocation: its key, tags, user, queue.

The ledger holds the pod's name and namespace, and an admitted allocation's tags as the scheduler sent them;
labels (`kubernetes.io/label/<k>`), the user (`yunikorn.apache.org/user.info` or `.../username`) and the queue
are read from those tags. See docs/yunikorn.md for the whole mapping.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agent.state.records import Allocation
from qos.ids import IdError, parse_container_id
from qos.model import Source

META_NAMESPACE = "kubernetes.io/meta/namespace"
META_POD_NAME = "kubernetes.io/meta/podName"
LABEL_PREFIX = "kubernetes.io/label/"
USER_INFO = "yunikorn.apache.org/user.info"
USERNAME = "yunikorn.apache.org/username"
QUEUE = "yunikorn.apache.org/queue"
DEFAULT_USER = "nobody"  # the k8shim's constants.DefaultUser
# yunikorn-core pkg/common/security/usergroup.go: anything else is "invalid username".
_USER_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9:#/_.@-]*[$]?$")


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    problem: str = ""  # why a user found in the tags was not used


def allocation_key(a: Allocation) -> str:
    """The k8shim's key for a pod is its bare UID (`TaskID: string(pod.UID)`); other keys stay as they are."""
    return a.key.removeprefix("k8s/") if a.source is Source.K8S else a.key


def placed_by_scheduler(a: Allocation) -> bool:
    """Admitted through the agent's API by a scheduler (epoch > 0), not adopted from the kubelet or a cgroup.

    YARN containers carry their ResourceManager's application id, so they are never foreign."""
    return a.source is Source.YARN or a.scheduler_epoch > 0


def is_yarn_am(a: Allocation) -> bool:
    """YARN's ApplicationMaster is container 1 of its attempt."""
    if a.source is not Source.YARN:
        return False
    try:
        return parse_container_id(a.key.removeprefix("yarn/")).is_am
    except IdError:
        return False


def pod_tags(a: Allocation) -> dict[str, str]:
    """`CreateTagsForTask`: the admitted tags, then a pod's namespace and name under `kubernetes.io/meta/`."""
    tags = dict(a.tags)
    if a.source is Source.K8S:
        if a.namespace:
            tags[META_NAMESPACE] = a.namespace
        if a.name:
            tags[META_POD_NAME] = a.name
    return tags


def _label(tags: dict[str, str], key: str) -> str:
    return tags.get(key) or tags.get(LABEL_PREFIX + key) or ""


def queue_of(tags: dict[str, str], default: str) -> str:
    """The k8shim's order: label, then annotation `yunikorn.apache.org/queue`, then label `queue`."""
    return _label(tags, QUEUE) or tags.get(LABEL_PREFIX + "queue") or default


def user_of(tags: dict[str, str]) -> User:
    """The k8shim's order: `user.info` JSON, then `username`, else `nobody`; a name the core would reject
    (or malformed JSON) falls back to `nobody` with the reason."""
    raw = _label(tags, USER_INFO)
    if raw:
        try:
            info = json.loads(raw)
            name, groups = info["user"], info.get("groups") or []
            if not isinstance(name, str) or not all(isinstance(g, str) for g in groups):
                raise TypeError("user and groups must be strings")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            return User(DEFAULT_USER,
                        problem=f"{USER_INFO} {raw!r} is not {{\"user\":..,\"groups\":[..]}}: {err}")
        return _checked(name, tuple(groups))
    name = _label(tags, USERNAME)
    return _checked(name, ()) if name else User(DEFAULT_USER)


def _checked(name: str, groups: tuple[str, ...]) -> User:
    if not _USER_RE.fullmatch(name):
        return User(DEFAULT_USER, problem=f"user {name!r}: invalid username, it contains invalid characters "
                                          "(yunikorn-core would reject the application)")
    return User(name, groups)
