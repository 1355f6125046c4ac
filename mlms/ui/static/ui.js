// Live regions: an element with data-live="URL" is replaced every data-every ms by the HTML
// fragment at URL, until the fragment marks itself done (data-done). A session that ended
// (401) goes to the login page.
"use strict";

function live(element) {
  const every = Number(element.dataset.every) || 2000;
  async function refresh() {
    let response;
    try {
      response = await fetch(element.dataset.live, {credentials: "same-origin"});
    } catch (err) {
      setTimeout(refresh, every * 2);  // the UI restarting: try again, slower
      return;
    }
    if (response.status === 401) {
      location.assign("/login?next=" + encodeURIComponent(location.pathname));
      return;
    }
    if (response.ok) {
      element.innerHTML = await response.text();
    }
    if (!element.querySelector("[data-done]")) {
      setTimeout(refresh, every);
    }
  }
  if (!element.querySelector("[data-done]")) {
    setTimeout(refresh, every);
  }
}

document.querySelectorAll("[data-live]").forEach(live);
