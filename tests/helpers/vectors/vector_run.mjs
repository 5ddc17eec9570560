// The shared end of the Node vector scripts (overlay_vectors.mjs, jcs_vectors.mjs): run
// each case of a vectors file and each named check, print one JSON summary line that
// the Python test reads, and exit 1 on any failure.
import { readFileSync } from "node:fs";

/**
 * @param {string} vectorsPath the vectors file ({"cases": [...]})
 * @param {(entry: object) => string | null} checkCase null when a case passes, else why
 * @param {Record<string, () => boolean>} checks named checks that must return true
 */
export function runVectors(vectorsPath, checkCase, checks) {
  const { cases } = JSON.parse(readFileSync(vectorsPath, "utf8"));
  const failures = [];
  let passed = 0;
  for (const entry of cases) {
    const reason = checkCase(entry);
    if (reason === null) passed += 1;
    else failures.push({ name: entry.name, reason });
  }
  let checksPassed = 0;
  for (const [name, check] of Object.entries(checks)) {
    let ok = false;
    try {
      ok = check() === true;
    } catch {
      ok = false;
    }
    if (ok) checksPassed += 1;
    else failures.push({ name: `check: ${name}`, reason: "failed" });
  }
  process.stdout.write(
    `${JSON.stringify({
      vectors: vectorsPath,
      cases: cases.length,
      passed,
      checks: Object.keys(checks).length,
      checks_passed: checksPassed,
      failures,
    })}\n`,
  );
  process.exitCode = failures.length === 0 ? 0 : 1;
}
