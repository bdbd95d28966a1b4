// Sends the "try it" box's JSON to the platform's predict endpoint with the session's CSRF token.
(function () {
  var form = document.getElementById("try-it");
  if (!form) { return; }
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
        answer.textContent = "HTTP " + response.status + (version ? " · version " + version : "") + "\n" + text;
      });
    }).catch(function (error) { answer.textContent = String(error); });
  });
})();
