// Every page: a select marked data-autosubmit submits its form when changed (the tenant and language switchers).
// Kept out of the markup so that the Content-Security-Policy allows no inline script.
(function () {
  "use strict";
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () {
      if (select.form) select.form.submit();
    });
  });
})();
