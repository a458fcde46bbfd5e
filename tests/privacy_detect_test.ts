import { assert, assertEquals, assertThrows } from "./_assert.ts";
import {
  ibanValid,
  luhnValid,
  type PersonalDataCategory,
  PersonalDataDetector,
} from "../src/privacy/detect.ts";

const FIXTURES = new URL("./fixtures/", import.meta.url);

async function lines(name: string): Promise<string[]> {
  return (await Deno.readTextFile(new URL(name, FIXTURES))).trimEnd().split("\n");
}

function found(text: string, detector = new PersonalDataDetector()): string[] {
  return detector.find(text).map((m) => `${m.category}:${m.value}`);
}

Deno.test("PersonalDataDetector changes fewer than 1% of 1,000 lines of ordinary technical text", async () => {
  const corpus = await lines("privacy_ordinary.txt");
  assertEquals(corpus.length, 1000);
  const detector = new PersonalDataDetector();
  const changed = corpus.filter((line) => detector.find(line).length > 0);
  console.log(`ordinary corpus: ${changed.length} of ${corpus.length} lines changed`, changed);
  assert(changed.length < 10, `${changed.length} lines changed:\n${changed.join("\n")}`);
});

Deno.test("PersonalDataDetector finds at least 95% of each category of a labelled set", async () => {
  const labelled = (await lines("privacy_labelled.jsonl")).map((l) =>
    JSON.parse(l) as { category: PersonalDataCategory; value: string; line: string }
  );
  const detector = new PersonalDataDetector();
  const recall: Record<string, { found: number; of: number; missed: string[] }> = {};
  for (const { category, value, line } of labelled) {
    const entry = recall[category] ??= { found: 0, of: 0, missed: [] };
    entry.of++;
    const hit = detector.find(line).some((m) => m.category === category && m.value === value);
    if (hit) entry.found++;
    else entry.missed.push(line);
  }
  console.log(
    "recall:",
    Object.entries(recall).map(([c, r]) => `${c} ${r.found}/${r.of}`).join(", "),
  );
  assertEquals(Object.keys(recall).sort(), ["card", "email", "iban", "ip", "phone", "ssn"]);
  for (const [category, r] of Object.entries(recall)) {
    assert(r.of >= 50, `${category}: only ${r.of} labelled lines`);
    assert(r.found / r.of >= 0.95, `${category}: ${r.found}/${r.of}, missed ${r.missed}`);
  }
});

Deno.test("PersonalDataDetector tells personal data from look-alikes", () => {
  const yes: Array<[string, string]> = [
    ["mail jane.doe+x@mail.example.co.uk now", "email:jane.doe+x@mail.example.co.uk"],
    ["MAIL JANE.DOE@EXAMPLE.ORG", "email:JANE.DOE@EXAMPLE.ORG"],
    ["call (415) 555-2671 today", "phone:(415) 555-2671"],
    ["tel +44 20 7946 0958", "phone:+44 20 7946 0958"],
    ["visa 4111 1111 1111 1111", "card:4111 1111 1111 1111"],
    ["amex 378282246310005.", "card:378282246310005"],
    ["IBAN DE89 3704 0044 0532 0130 00", "iban:DE89 3704 0044 0532 0130 00"],
    ["GB82WEST12345698765432", "iban:GB82WEST12345698765432"],
    ["SSN 123-45-6789", "ssn:123-45-6789"],
    ["from 8.8.8.8 port 53", "ip:8.8.8.8"],
    ["peer 2a00:1450:4001:82b::200e said", "ip:2a00:1450:4001:82b::200e"],
  ];
  for (const [text, expected] of yes) assertEquals(found(text), [expected], text);
  const no = [
    "version 1.2.3.4 and v10.0.0.1",
    "npm:zod@4.6.7 and git@1.2",
    "released 2024-05-01 at 12:30:45",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "sha 9b74c9897bac770ffc029102a200c5de",
    "price $1,234.56, 1 234 567,89 €",
    "4111 1111 1111 1112", // fails Luhn
    "DE89 3704 0044 0532 0130 01", // fails the checksum
    "000-12-3456 666-12-3456 900-12-3456 123-00-4567", // never issued
    "listen on 127.0.0.1:8080, 0.0.0.0, ::1 and 192.0.2.7, 2001:db8::1",
    "std::vector<int>; ratio 16:9; MAC 00:1a:2b:3c:4d:5e",
    "ports 25654-38420, order 4155552671, id 415-5552671-x",
    "user@localhost and a@b",
    // The head of a longer token is no IBAN, even within reach of another IBAN-shaped start.
    "tracking IZ4783B91528230042, inv LU768S43018569716543oice",
  ];
  for (const text of no) assertEquals(found(text), [], text);
});

Deno.test("PersonalDataDetector looks only for the categories it is given", () => {
  const text = "jane@example.org 123-45-6789 8.8.8.8";
  assertEquals(found(text, new PersonalDataDetector({ categories: ["ssn"] })), [
    "ssn:123-45-6789",
  ]);
  assertEquals(
    found("ask 10.1.2.3", new PersonalDataDetector({ ignoredIpRanges: ["10.0.0.0/8"] })),
    [],
  );
  assertEquals(found("ask 10.1.2.3"), ["ip:10.1.2.3"]);
  assertEquals(
    found("06 12 34 56 78", new PersonalDataDetector({ phoneRegion: "FR" })),
    ["phone:06 12 34 56 78"],
  );
  assertThrows(() => new PersonalDataDetector({ phoneRegion: "ZZ" }), TypeError);
  assertThrows(() => new PersonalDataDetector({ ignoredIpRanges: ["10.0.0.0/99"] }), TypeError);
});

Deno.test("luhnValid() and ibanValid() check the checksums", () => {
  assert(luhnValid("4111111111111111"));
  assert(!luhnValid("4111111111111112"));
  assert(ibanValid("DE89370400440532013000"));
  assert(!ibanValid("DE89370400440532013001"));
  assert(!ibanValid("DE8937040044053201300")); // one digit short for DE
});
