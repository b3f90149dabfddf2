"""A browser's views of a ``jupyter_bokeh`` widget, in Python, to test what they end up showing.

Each :class:`BokehView` does what jupyter_bokeh's ``BokehView`` does in the page:
it builds its own Bokeh document from the widget's ``render_bundle`` (again
whenever that state changes), ignores patch frames while it has no document,
and feeds every patch frame to one receiver for its whole life, as BokehJS's
``Receiver`` does (header, metadata, content, then a reference and a payload
per buffer; a text frame where a payload is due, or the reverse, is an error
that leaves the receiver where it was). A view made between the frames of a
patch therefore reads the frames that follow shifted, as a real one does, and
applies nothing correctly until the widget's state changes.
"""

from __future__ import annotations

import json
from typing import Any

from bokeh.core.serialization import Buffer, Serialized
from bokeh.document import Document

Message = tuple[str, Any, list[Any]]  # (msg_type, data, buffers) as the kernel's comm sent it


class Receiver:
    """BokehJS's protocol receiver: fragments in, whole messages out."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self._frames: list[str] = []
        self._buffers: list[Buffer] = []
        self._ref: str | None = None
        self._want = "header"

    def consume(self, frame: str | bytes) -> None:
        text = isinstance(frame, str)
        if self._want == "payload":
            if text:
                raise ValueError("expected a binary fragment")
            self._buffers.append(Buffer(json.loads(self._ref)["id"], bytes(frame)))
            self._check_complete()
            return
        if not text:
            raise ValueError("expected a text fragment")
        if self._want == "header":
            self.message, self._frames, self._buffers, self._ref = None, [frame], [], None
            self._want = "metadata"
        elif self._want == "metadata":
            self._frames.append(frame)
            self._want = "content"
        elif self._want == "content":
            self._frames.append(frame)
            self._check_complete()
        else:  # a buffer's reference
            self._ref = frame
            self._want = "payload"

    def _check_complete(self) -> None:
        header = json.loads(self._frames[0])
        n = header.get("num_buffers") if isinstance(header, dict) else None
        if n is None or len(self._buffers) == n:
            self.message = {"header": header, "content": json.loads(self._frames[2]),
                            "buffers": list(self._buffers)}
            self._want = "header"
        else:
            self._want = "ref"


class BokehView:
    """One view of the widget, made from the state it had then (``bundle``)."""

    def __init__(self, bundle: str) -> None:
        self.receiver = Receiver()
        self.doc: Document | None = None
        self.failed = 0  # patches that did not apply (a shifted receiver's garbage)
        self.render(bundle)

    def render(self, bundle: str) -> None:
        docs = json.loads(bundle)["docs_json"]
        self.doc = Document.from_json(next(iter(docs.values())))

    def custom(self, content: dict[str, Any], buffers: list[Any]) -> None:
        if self.doc is None or content.get("msg") != "patch":
            return
        payload = content.get("payload")
        try:
            self.receiver.consume(payload if payload is not None else buffers[0])
        except (ValueError, KeyError, TypeError, json.JSONDecodeError):
            self.failed += 1
            return
        msg = self.receiver.message
        if msg is not None and isinstance(msg["content"], dict) and msg["content"]:
            try:
                self.doc.apply_json_patch(Serialized(content=msg["content"],
                                                     buffers=msg["buffers"]))
            except Exception:  # BokehJS throws on such a patch too, and goes on
                self.failed += 1

    def data(self, model_id: str) -> dict[str, list[Any]]:
        assert self.doc is not None
        return {k: list(v) for k, v in self.doc.get_model_by_id(model_id).data.items()}

    def divs(self) -> str:
        assert self.doc is not None
        return " ".join(str(getattr(m, "text", "")) for m in self.doc.models
                        if type(m).__name__ == "Div")


class Frontend:
    """The widget's model in the page and its views: messages are delivered in the order
    given (a test may reorder them, as the page's asynchronous state updates can)."""

    def __init__(self, opened: Message) -> None:
        self.bundle: str = opened[1]["state"]["render_bundle"]
        self.views: list[BokehView] = []

    def new_view(self) -> BokehView:
        view = BokehView(self.bundle)
        self.views.append(view)
        return view

    def deliver(self, msg: Message, to: list[BokehView] | None = None) -> None:
        _, data, buffers = msg
        views = self.views if to is None else to
        if data.get("method") == "update" and "render_bundle" in data.get("state", {}):
            self.bundle = data["state"]["render_bundle"]
            for v in views:
                v.render(self.bundle)
        elif data.get("method") == "custom":
            for v in views:
                v.custom(data["content"], buffers)


def is_patch(msg: Message) -> bool:
    return msg[1].get("method") == "custom" and msg[1]["content"].get("msg") == "patch"


def is_bundle(msg: Message) -> bool:
    return msg[1].get("method") == "update" and "render_bundle" in msg[1].get("state", {})
