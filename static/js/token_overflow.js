// Token management on the agent form (seed 4, 7.1): show only the chosen strategy's fields, let a preset fill
// the maximum tokens. Without this script every field is shown and the server validates and applies the preset.
(function () {
  "use strict";
  var form = document.getElementById("agent-form");
  if (!form) return;
  var radios = form.querySelectorAll('input[name="overflow_strategy"]');
  var dependents = form.querySelectorAll("[data-strategies]");
  var preset = form.querySelector('select[name="overflow_preset"]');
  var maxTokens = form.querySelector('input[name="overflow_max_tokens"]');
  var presetData = document.getElementById("preset-tokens");
  var presetTokens = presetData ? JSON.parse(presetData.textContent) : {};

  function chosenStrategy() {
    for (var i = 0; i < radios.length; i++) {
      if (radios[i].checked) return radios[i].value;
    }
    return "none";
  }

  function showFieldsOf(strategy) {
    dependents.forEach(function (element) {
      var strategies = element.getAttribute("data-strategies").split(" ");
      element.hidden = strategies.indexOf(strategy) === -1;
    });
  }

  radios.forEach(function (radio) {
    radio.addEventListener("change", function () { showFieldsOf(chosenStrategy()); });
  });
  if (preset && maxTokens) {
    preset.addEventListener("change", function () {
      var tokens = presetTokens[preset.value];
      if (tokens) {
        maxTokens.value = tokens;
        maxTokens.dispatchEvent(new Event("input", { bubbles: true }));
      }
    });
  }
  showFieldsOf(chosenStrategy());
})();
