// Live status of a submission page: follow /v1/submissions/{id}/events (server-sent events) and update the
// status line and the shared headers' build it may wait on; when the judging is done, reload so the server renders the verdict. Without JavaScript the
// page's <noscript> meta refresh does the same job, more slowly.
(function () {
  "use strict";
  var box = document.getElementById("status");
  if (!box || box.dataset.status === "done" || box.dataset.status === "cancelled" || !window.EventSource) return;
  var text = document.getElementById("status-text");
  var stage = document.getElementById("status-stage");
  var headers = document.getElementById("shared-headers");
  var source = new EventSource(box.dataset.events);
  source.addEventListener("status", function (event) {
    var view = JSON.parse(event.data);
    // textContent, never innerHTML: the values are shown as text whatever they contain.
    text.textContent = view.status;
    text.className = "state state-" + view.status;
    stage.textContent = (view.stage !== view.status ? "(" + view.stage + ")" : "") +
      (view.position !== null && view.position !== undefined ? " position " + view.position + " in the queue" : "");
    var building = view.shared_headers;
    if (building && building.state === "building") {
      headers.textContent = "Shared precompiled headers: " +
        (building.building ? "building " + building.building + " for " + Math.round(building.building_s || 0) + " s, " : "") +
        building.ready + " of " + building.total + " ready. A first C++ build on this host waits for the header of " +
        "its flags; they are built once, in the background since the worker started.";
      headers.hidden = false;
    } else {
      headers.hidden = true;
    }
    box.dataset.status = view.status;
    if (view.status === "done" || view.status === "cancelled") {
      source.close();
      window.location.reload();
    }
  });
})();
