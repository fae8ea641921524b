// The operator console in headless Chromium (Debian's package), driven by
// playwright-core: run by shapetest.Console in each shape (galley serve,
// where the console follows a worker by stream; the aws-local stack, where
// it long polls), which launched a scripted worker whose status and
// question carry markup and script. It opens /operator (the redirect to
// the console), logs in, sees the worker in the list, follows its timeline
// live through the reply it sends (as kitchn would), counting the stream
// and long-poll requests, reloads and sees the same timeline, cancels it
// from the console, takes screenshots at phone and desktop width, times
// the list render of 1,000 workers, checks that nothing an agent wrote ran
// or became markup, and logs out, replaying the session's cookie
// afterwards. It prints one JSON object: what the Go test checks.
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(k + " is not set");
  return v;
};
const endpoint = env("GALLEY_ENDPOINT");
const opToken = readFileSync(env("GALLEY_OPERATOR_TOKEN_FILE"), "utf8").trim();
const kitchnToken = readFileSync(env("GALLEY_TOKEN_FILE"), "utf8").trim();
const handle = env("GALLEY_WORKER");
const run = env("GALLEY_RUN");
const house = env("GALLEY_HOUSE");
const question = env("GALLEY_QUESTION");
const shots = env("GALLEY_SHOT_DIR");
const T = 90000;

const result = { screenshots: [], alerts: [], errors: [], streams: 0, polls: 0 };
// A fresh profile (--user-data-dir, which playwright passes for a
// persistent context) for every run.
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "galley-chromium-")), {
  executablePath: process.env.GALLEY_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await context.newPage();
  page.on("dialog", async (d) => { result.alerts.push(d.message()); await d.dismiss(); });
  page.on("pageerror", (e) => result.errors.push(String(e)));
  // After the login, no call of the page fails (the browser's own
  // /favicon.ico aside: galley serves none).
  let loggedIn = false;
  page.on("response", (r) => {
    if (loggedIn && r.status() >= 400 && !r.url().endsWith("/favicon.ico")) result.errors.push(r.status() + " " + r.url());
  });
  // How the page follows a worker: by stream, or by long poll.
  page.on("request", (r) => {
    if (r.url().includes("/stream")) result.streams++;
    if (r.url().includes("/events?")) result.polls++;
  });

  await page.goto(endpoint + "/operator");
  result.url = page.url();
  await page.waitForSelector("#login:not([hidden])", { timeout: T });
  await page.fill("#token", opToken);
  loggedIn = true;
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector(`#workers tr[data-handle="${handle}"]`, { timeout: T });
  result.tokenInStorage = await page.evaluate((t) =>
    JSON.stringify({ ...localStorage }).includes(t) || JSON.stringify({ ...sessionStorage }).includes(t) ||
    document.cookie.includes(t) || location.href.includes(t), opToken);
  result.listRows = await page.locator("#workers tbody tr").count();

  await page.click(`#workers tr[data-handle="${handle}"]`);
  await page.waitForSelector("#detail:not([hidden])", { timeout: T });
  // The question is on the timeline and in the thread, as text.
  await page.waitForSelector("#thread li.k-question", { timeout: T });
  const seenBefore = await page.locator("#timeline li").count();

  // kitchn replies now; the page shows it without a reload.
  const reply = await fetch(endpoint + "/v1/effects", {
    method: "POST",
    headers: { "Authorization": "Bearer " + kitchnToken, "Content-Type": "application/json", "Idempotency-Key": "k-console-reply" },
    body: JSON.stringify({ run, request: { house, backend: "galley", credential: "galley-token", task: "issue-1", attempt: 1,
      key: "k-console-reply", effect: { executor: "worker", effect: { type: "reply-to-worker",
        worker: { kind: "worker", backend: "galley", handle }, question, body: "go <i>left</i>" } } } }),
  });
  result.replyStatus = reply.status;
  await page.waitForSelector("#thread li.k-reply", { timeout: T });
  await page.waitForFunction(() => [...document.querySelectorAll("#timeline li")].some((li) => li.textContent.includes("reply: go <i>left</i>")), null, { timeout: T });
  result.liveAdded = (await page.locator("#timeline li").count()) - seenBefore;

  const timeline = async () => page.$$eval("#timeline li", (ls) => ls.map((l) => l.dataset.seq + " " + l.textContent));
  const before = await timeline();
  await page.screenshot({ path: join(shots, "desktop-detail.png"), fullPage: true });
  result.screenshots.push("desktop-detail.png");

  await page.reload();
  await page.waitForSelector("#detail:not([hidden])", { timeout: T });
  await page.waitForFunction((n) => document.querySelectorAll("#timeline li").length >= n, before.length, { timeout: T });
  const after = await timeline();
  result.sameAfterReload = before.every((line, i) => after[i] === line);
  result.seqs = await page.$$eval("#timeline li", (ls) => ls.map((l) => Number(l.dataset.seq)));
  // The follow says "live" once the stream or a poll has answered.
  await page.waitForFunction(() => document.getElementById("status").textContent === "live", null, { timeout: T });
  result.live = "live";

  // Nothing an agent wrote ran or became an element.
  result.pwned = await page.evaluate(() => window.__pwned === 1);
  result.injected = await page.evaluate(() => document.querySelectorAll("#timeline img, #timeline script, #timeline b, #timeline i, #thread img, #thread script, #thread b, #thread i").length);
  result.markupShownAsText = await page.evaluate(() => document.querySelector("#timeline").textContent.includes("<script>window.__pwned=1</script>"));

  // Phone width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: join(shots, "phone-detail.png"), fullPage: true });
  result.screenshots.push("phone-detail.png");
  result.phoneOverflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);

  // Cancel, with the confirmation.
  await page.click("#cancel");
  await page.waitForSelector("#confirm[open]", { timeout: T });
  await page.click("#confirm-yes");
  await page.waitForFunction(() => [...document.querySelectorAll("#timeline li.k-state")].some((li) => li.textContent.includes("state=settled")), null, { timeout: T });
  result.cancelled = true;
  // The cancel's own "cancel done" and the event that brings the
  // settlement race, so the status after the cancel may be either.
  result.afterCancel = await page.evaluate(() => document.getElementById("status").textContent);

  // The list (the console's own path: on AWS /operator/ is no route).
  await page.goto(endpoint + "/operator/console#");
  await page.waitForSelector(`#workers tr[data-handle="${handle}"]`, { timeout: T });
  await page.screenshot({ path: join(shots, "phone-list.png"), fullPage: true });
  result.screenshots.push("phone-list.png");
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: join(shots, "desktop-list.png"), fullPage: true });
  result.screenshots.push("desktop-list.png");

  // The list render of 1,000 workers, timed in the page (render and layout).
  result.list1000Ms = await page.evaluate(async () => {
    const { renderList } = await import("./app.js");
    const ws = [];
    for (let i = 0; i < 1000; i++) {
      const parked = i % 3 === 1; // waits on its coordinator, its compute ended
      ws.push({ handle: "w-bench-" + i, state: parked ? "awaiting-reply" : i % 3 ? "ready" : "settled", outcome: i % 3 ? "" : "succeeded",
        ageSeconds: i * 7, parked, parkedSince: parked ? new Date(Date.now() - i * 1000).toISOString() : undefined,
        agent: "claude", model: "opus", branch: "bench/" + i, tokens: { input: i * 100, output: i * 10 },
        cost: { microUsd: i * 1234, basis: "estimate" }, lastEvent: { kind: "mailbox", text: "status <b>" + i + "</b>" } });
    }
    const runs = [];
    for (let r = 0; r < 5; r++) {
      const t0 = performance.now();
      renderList(ws);
      void document.body.offsetHeight;
      runs.push(performance.now() - t0);
    }
    runs.sort((a, b) => a - b);
    const stateOf = (h) => document.querySelector(`#workers tr[data-handle="${h}"] td[data-label="State"]`).textContent;
    return { median: runs[2], max: runs[4], rows: document.querySelectorAll("#workers tbody tr").length,
      parkedState: stateOf("w-bench-1"), readyState: stateOf("w-bench-2") };
  });

  // Log out: the page shows the login form, and the session's cookie,
  // replayed from outside the browser, opens nothing.
  const old = (await context.cookies(endpoint + "/operator/")).find((c) => c.name === "galley_operator");
  loggedIn = false; // a list refresh in flight may meet the ended session
  await page.click("#logout");
  await page.waitForSelector("#login:not([hidden])", { timeout: T });
  const gone = (await context.cookies(endpoint + "/operator/")).every((c) => c.name !== "galley_operator");
  const replay = await fetch(endpoint + "/operator/v1/workers", { headers: { Cookie: "galley_operator=" + (old ? old.value : "") } });
  result.cookieAfterLogout = old && gone ? replay.status : 0;
} finally {
  await context.close();
}
console.log(JSON.stringify(result));
