// schedlock dashboard: signs in (when the server has API tokens), then runs the page's loader every 5 seconds.
//
// The token lives in sessionStorage (this tab only) and travels as an Authorization header (api.js); the page sets
// no cookie and sends none, so another site cannot make the browser act with it. ES modules, served by the app as
// they are: no build step.

import { api, token, tokensRequired, whenRefused } from "./api.js";
import { $, setStatus, tick } from "./format.js";
import { lockPage } from "./lock.js";
import { jobPage, jobsPage } from "./jobs.js";
import { locksPage } from "./locks.js";

const REFRESH_MS = 5000;
let timer = null;
let page = null; // the page's loader, made once
let session = null; // what /ui/session says the current token may do

function showSignin(message = "") {
  clearInterval(timer);
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("signout").hidden = true;
  $("who-text").textContent = "";
  $("token").focus();
}

function signOut(message = "") {
  token.forget();
  showSignin(message);
}

/** The top bar's "who": the token's name, access, admin, and the names it may read. */
function showWho(session) {
  const who = $("who-text");
  who.textContent = "";
  if (!session.auth) {
    who.append("Open server: no API tokens (loopback only)");
    return;
  }
  who.append(`Token ${session.token}`);
  const tag = (text, cls = "") => {
    const span = document.createElement("span");
    span.className = `tag ${cls}`;
    span.textContent = text;
    who.append(span);
  };
  tag(session.access);
  if (session.admin) tag("admin", "admin");
  tag(session.prefixes ? `names: ${session.prefixes.join(", ")}` : "all names");
  $("signout").hidden = false;
}

async function start() {
  if (tokensRequired && !token.get()) {
    showSignin();
    return;
  }
  try {
    session = await api("/ui/session");
  } catch (err) {
    if (err.status !== 401) setStatus(`Cannot reach the server: ${err.message}`, true);
    return; // a refused token: whenRefused has shown the sign-in form with the reason
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  showWho(session);
  const pages = { lock: () => lockPage(() => session), jobs: jobsPage, job: jobPage };
  page = page || (pages[document.body.dataset.page] || locksPage)();
  await page.refresh().catch(() => {});
  clearInterval(timer);
  timer = setInterval(() => {
    if (document.visibilityState === "visible") page.refresh().catch(() => {});
  }, REFRESH_MS);
}

whenRefused((reason) => signOut(`The server refused the token: ${reason}`));
$("signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  token.set(value);
  $("token").value = "";
  await start();
});
$("signout").addEventListener("click", () => signOut());
setInterval(tick, 1000);
start();
