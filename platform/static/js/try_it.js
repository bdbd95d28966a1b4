// Sends the "try it" box's JSON to the model page's predict endpoint with the session's CSRF token.
(function () {
  var form = document.getElementById("try-it");
  if (!form) { return; }

  // One prediction per line: indenting every probability would bury the class ids.
  function readable(text) {
    try {
      var body = JSON.parse(text);
      if (!Array.isArray(body.predictions)) { return JSON.stringify(body, null, 2); }
      return '{"predictions": [\n  ' + body.predictions.map(function (row) {
        return JSON.stringify(row);
      }).join(",\n  ") + "\n]}";
    } catch (ignored) {
      return text;  // not JSON: shown as it came
    }
  }
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var answer = document.getElementById("try-answer");
    answer.textContent = "…";
    fetch(form.getAttribute("data-url"), {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value
      },
      body: document.getElementById("try-body").value
    }).then(function (response) {
      var version = response.headers.get("X-Model-Version");
      return response.text().then(function (text) {
        text = readable(text);
        answer.textContent = "HTTP " + response.status + (version ? " · version " + version : "") + "\n" + text;
      });
    }).catch(function (error) { answer.textContent = String(error); });
  });
})();
