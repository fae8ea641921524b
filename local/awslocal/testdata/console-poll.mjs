// The operator console in headless Chromium (Debian's package), driven by
// playwright-core, against the aws-local stack, where the console follows
// a worker's events by long poll (the stack cannot stream): run by
// TestConsoleLongPollAWSLocal (console_test.go), which launched a scripted
// worker posting three statuses. It opens /operator (the redirect to the
// console), logs in, opens the worker, waits for the statuses to appear
// live, reloads and sees the same timeline, and cancels the worker from
// the console. It prints one JSON object: what the Go test checks.
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
const handle = env("GALLEY_WORKER");
const T = 90000;

const result = { errors: [], streams: 0, polls: 0 };
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "galley-chromium-")), {
  executablePath: process.env.GALLEY_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 390, height: 844 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await context.newPage();
  page.on("pageerror", (e) => result.errors.push(String(e)));
  let loggedIn = false;
  page.on("request", (r) => {
    if (r.url().includes("/stream")) result.streams++;
    if (r.url().includes("/events?")) result.polls++;
  });
  page.on("response", (r) => {
    if (loggedIn && r.status() >= 400 && !r.url().endsWith("/favicon.ico")) result.errors.push(r.status() + " " + r.url());
  });

  await page.goto(endpoint + "/operator");
  result.url = page.url();
  await page.waitForSelector("#login:not([hidden])", { timeout: T });
  await page.fill("#token", opToken);
  loggedIn = true;
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector(`#workers tr[data-handle="${handle}"]`, { timeout: T });
  await page.click(`#workers tr[data-handle="${handle}"]`);
  await page.waitForSelector("#detail:not([hidden])", { timeout: T });

  const has = (text) => page.waitForFunction((t) => [...document.querySelectorAll("#timeline li")].some((li) => li.textContent.includes(t)), text, { timeout: T });
  await has("status-three");
  const timeline = async () => page.$$eval("#timeline li", (ls) => ls.map((l) => l.dataset.seq + " " + l.textContent));
  const before = await timeline();
  result.seqs = await page.$$eval("#timeline li", (ls) => ls.map((l) => Number(l.dataset.seq)));

  await page.reload();
  await page.waitForSelector("#detail:not([hidden])", { timeout: T });
  await page.waitForFunction((n) => document.querySelectorAll("#timeline li").length >= n, before.length, { timeout: T });
  const after = await timeline();
  result.sameAfterReload = before.every((line, i) => after[i] === line);
  // The follow says "live" once a poll has answered; the cancel's own
  // "cancel done" and the poll that brings the settlement race, so the
  // status after the cancel may be either.
  await page.waitForFunction(() => document.getElementById("status").textContent === "live", null, { timeout: T });
  result.live = "live";

  await page.click("#cancel");
  await page.waitForSelector("#confirm[open]", { timeout: T });
  await page.click("#confirm-yes");
  await page.waitForFunction(() => [...document.querySelectorAll("#timeline li.k-state")].some((li) => li.textContent.includes("state=settled")), null, { timeout: T });
  result.cancelled = true;
  result.afterCancel = await page.evaluate(() => document.getElementById("status").textContent);
} finally {
  await context.close();
}
console.log(JSON.stringify(result));
