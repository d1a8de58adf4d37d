// The dashboard's only script. Pages work without it (every action is a plain form); with
// it, a page's live part updates itself, and destructive actions ask first.
"use strict";

(function () {
  const live = document.getElementById("live");
  const every = live && Number(live.dataset.refreshMs);
  if (every > 0) {
    let busy = false;
    const update = async function () {
      if (busy || document.hidden) return;
      busy = true;
      // What the viewer ticked survives the swap.
      const ticked = new Set(
        Array.from(live.querySelectorAll("input[name=id]:checked"), (box) => box.value)
      );
      try {
        const url = new URL(location.href);
        url.searchParams.delete("notice");
        const answer = await fetch(url, { headers: { "X-Leasehold-Live": "1" }, credentials: "same-origin" });
        if (answer.ok) {
          const html = await answer.text();
          // Unchanged: leave the page (and what is under the pointer) alone.
          if (html === live.dataset.last) return;
          live.dataset.last = html;
          live.innerHTML = html;
          for (const box of live.querySelectorAll("input[name=id]")) box.checked = ticked.has(box.value);
          live.dataset.stale = "false";
          live.dataset.updated = String(Date.now());
        } else {
          live.dataset.stale = "true";
        }
      } catch (_) {
        live.dataset.stale = "true";
      } finally {
        busy = false;
      }
    };
    setInterval(update, every);
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
  });

  document.addEventListener("change", function (event) {
    if (!event.target.matches("[data-select-all]")) return;
    for (const box of document.querySelectorAll("input[name=id]")) box.checked = event.target.checked;
  });
})();
