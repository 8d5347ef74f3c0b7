"""A served page for ``tests/test_ui_event_order.py``: a value typed, then a button clicked.

The weight's handler takes a moment (as the builder's checks can under load) and
the button reads what that handler stored.  ``ORDERED=0`` serves it with
Panel's own pool, to show the test can fail.
"""

import os
import time

import panel as pn

from dpexplorer.ui.serving import install

pn.extension(nthreads=2)
if os.environ.get("ORDERED", "1") == "1":
    install()

stored = {"weight": "1"}
weight = pn.widgets.TextInput(name="Weight", value="1")
out = pn.pane.Markdown("nothing added")
add = pn.widgets.Button(name="Add")


def on_weight(event):
    time.sleep(1.0)  # under HOLD_SECONDS: the click waits for it
    stored["weight"] = event.new


def on_add(_):
    out.object = f"added with weight {stored['weight']}"


weight.param.watch(on_weight, "value")
add.on_click(on_add)
pn.Column(weight, add, out).servable()
