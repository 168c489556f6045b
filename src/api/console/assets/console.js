// faxline console: progressive enhancement only; every page works without it.
// 1. Live status: rows and pages marked data-live-job poll /console/outbox/status until final.
// 2. Drag and drop of documents onto the New fax form's drop zone.
(function () {
  'use strict';
  var FINAL = { delivered: 1, failed: 1, cancelled: 1, rejected: 1 };
  var nodes = Array.prototype.slice.call(document.querySelectorAll('[data-live-job]'));
  var started = Date.now();
  function pending() {
    return nodes.filter(function (n) {
      return !FINAL[n.getAttribute('data-state')];
    });
  }
  function poll() {
    var open = pending();
    // Bounded: stops when every fax shown is final, or after an hour on one page.
    if (open.length === 0 || Date.now() - started > 3600000) return;
    var q = open
      .slice(0, 100)
      .map(function (n) {
        return 'id=' + encodeURIComponent(n.getAttribute('data-live-job'));
      })
      .join('&');
    fetch('/console/outbox/status?' + q, {
      credentials: 'same-origin',
      headers: { accept: 'application/json' },
    })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (body) {
        if (body && body.states) {
          open.forEach(function (n) {
            var s = body.states[n.getAttribute('data-live-job')];
            if (s && s !== n.getAttribute('data-state')) {
              n.setAttribute('data-state', s);
              n.textContent = s;
            }
          });
        }
      })
      .catch(function () {
        /* the next poll tries again */
      })
      .then(function () {
        setTimeout(poll, 1500);
      });
  }
  if (nodes.length > 0) setTimeout(poll, 1000);

  var zone = document.querySelector('[data-drop]');
  var input = zone && zone.querySelector('input[type="file"]');
  if (zone && input) {
    ['dragenter', 'dragover'].forEach(function (t) {
      zone.addEventListener(t, function (e) {
        e.preventDefault();
        zone.classList.add('over');
      });
    });
    ['dragleave', 'drop'].forEach(function (t) {
      zone.addEventListener(t, function () {
        zone.classList.remove('over');
      });
    });
    zone.addEventListener('drop', function (e) {
      e.preventDefault();
      if (e.dataTransfer && e.dataTransfer.files.length > 0) input.files = e.dataTransfer.files;
    });
  }
})();
