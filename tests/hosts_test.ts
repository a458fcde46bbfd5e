import { assertEquals, assertMatch } from "./_assert.ts";
import { formatHostEntry, parseHostEntry, parseIPv4, parseIPv6 } from "../src/policy/hosts.ts";

function syntaxError(entry: string): string {
  try {
    parseHostEntry(entry);
  } catch (error) {
    if (error instanceof SyntaxError) return error.message;
    throw error;
  }
  throw new Error(`expected "${entry}" to be refused`);
}

/** Every spelling of 127.0.0.1 that a resolver or a URL parser accepts. */
const LOOPBACK_V4_SPELLINGS = [
  "127.0.0.1",
  "127.0.0.1.",
  "2130706433",
  "0177.0.0.1",
  "0177.0.0.01",
  "0177.1",
  "017700000001",
  "0x7f.0.0.1",
  "0X7F.0.0.1",
  "0x7f.0x0.0x0.0x1",
  "0x7f.1",
  "0x7f000001",
  "0x00007f000001",
  "127.1",
  "127.0.1",
  "127.000.000.001",
  "[::ffff:127.0.0.1]",
  "[::ffff:7f00:1]",
  "[::FFFF:7F00:0001]",
  "[0:0:0:0:0:ffff:127.0.0.1]",
  "[0000:0000:0000:0000:0000:ffff:7f00:0001]",
];

Deno.test("parseHostEntry() reads every IPv4 spelling of loopback as 127.0.0.1", () => {
  for (const spelling of LOOPBACK_V4_SPELLINGS) {
    const entry = parseHostEntry(spelling);
    assertEquals(entry.host, "127.0.0.1", spelling);
    assertEquals(entry.special, "the loopback address 127.0.0.1", spelling);
  }
  assertEquals(parseHostEntry("127.255.1.2").special, "the loopback address 127.255.1.2");
  assertEquals(parseHostEntry("0x7f.1:8080"), {
    host: "127.0.0.1",
    port: 8080,
    special: "the loopback address 127.0.0.1",
  });
});

Deno.test("parseHostEntry() reads IPv6 spellings of loopback and IPv4-compatible forms", () => {
  for (const spelling of ["[::1]", "[0:0:0:0:0:0:0:1]", "[::0:1]", "[0000::0001]", "[0::0:0:1]"]) {
    assertEquals(parseHostEntry(spelling).host, "[::1]", spelling);
    assertEquals(parseHostEntry(spelling).special, "the loopback address [::1]", spelling);
  }
  assertEquals(parseHostEntry("[::1]:8080").port, 8080);
  for (const spelling of ["[::127.0.0.1]", "[::7f00:1]", "[0:0:0:0:0:0:7f00:1]"]) {
    assertEquals(parseHostEntry(spelling).host, "[::7f00:1]", spelling);
    assertMatch(parseHostEntry(spelling).special ?? "", /IPv4-compatible.*127\.0\.0\.1/, spelling);
  }
  assertMatch(parseHostEntry("[::ffff:0:127.0.0.1]").special ?? "", /IPv4-translated/);
  assertMatch(parseHostEntry("[64:ff9b::127.0.0.1]").special ?? "", /NAT64.*loopback/);
  assertEquals(parseHostEntry("[64:ff9b::8.8.8.8]").special, undefined);
  assertMatch(parseHostEntry("[2002:7f00:1::]").special ?? "", /6to4.*loopback/);
  assertMatch(parseHostEntry("[2001:0:4136:e378::1]").special ?? "", /Teredo/);
});

Deno.test("parseHostEntry() names unspecified, private, link-local and metadata addresses", () => {
  const cases: Array<[string, string, RegExp]> = [
    ["0.0.0.0", "0.0.0.0", /unspecified address 0\.0\.0\.0/],
    ["0", "0.0.0.0", /unspecified/],
    ["0x0", "0.0.0.0", /unspecified/],
    ["0.1.2.3", "0.1.2.3", /unspecified/],
    ["[::]", "[::]", /unspecified address \[::\]/],
    ["[0:0:0:0:0:0:0:0]", "[::]", /unspecified/],
    ["10.1", "10.0.0.1", /private address 10\.0\.0\.1/],
    ["167772161", "10.0.0.1", /private/],
    ["012.0.0.1", "10.0.0.1", /private/],
    ["172.16.0.1", "172.16.0.1", /private/],
    ["172.31.255.255", "172.31.255.255", /private/],
    ["192.168.1.1", "192.168.1.1", /private/],
    ["0xc0a80101", "192.168.1.1", /private/],
    ["[::ffff:192.168.1.1]", "192.168.1.1", /private/],
    ["100.64.0.1", "100.64.0.1", /carrier-grade NAT/],
    ["100.127.255.255", "100.127.255.255", /carrier-grade NAT/],
    ["169.254.1.1", "169.254.1.1", /link-local/],
    ["169.254.169.254", "169.254.169.254", /cloud metadata address/],
    ["2852039166", "169.254.169.254", /cloud metadata/],
    ["0xa9.0xfe.0xa9.0xfe", "169.254.169.254", /cloud metadata/],
    ["0251.0376.0251.0376", "169.254.169.254", /cloud metadata/],
    ["169.254.43518", "169.254.169.254", /cloud metadata/],
    ["[::ffff:a9fe:a9fe]", "169.254.169.254", /cloud metadata/],
    ["169.254.170.2", "169.254.170.2", /cloud metadata/],
    ["100.100.100.200", "100.100.100.200", /cloud metadata/],
    ["168.63.129.16", "168.63.129.16", /cloud metadata/],
    ["[fd00:ec2::254]", "[fd00:ec2::254]", /cloud metadata/],
    ["[FD00:0EC2:0:0:0:0:0:0254]", "[fd00:ec2::254]", /cloud metadata/],
    ["[fc00::1]", "[fc00::1]", /unique local/],
    ["[fd12:3456::1]", "[fd12:3456::1]", /unique local/],
    ["[fe80::1]", "[fe80::1]", /link-local/],
    ["[FE80:0:0:0:0:0:0:1]", "[fe80::1]", /link-local/],
    ["[fec0::1]", "[fec0::1]", /site-local/],
    ["[ff02::1]", "[ff02::1]", /multicast/],
    ["224.0.0.1", "224.0.0.1", /multicast/],
    ["255.255.255.255", "255.255.255.255", /broadcast/],
    ["240.0.0.1", "240.0.0.1", /reserved/],
    ["198.18.0.1", "198.18.0.1", /benchmarking/],
    ["localhost", "localhost", /loopback name localhost/],
    ["LOCALHOST", "localhost", /loopback name/],
    ["localhost.", "localhost", /loopback name/],
    ["LocalHost.", "localhost", /loopback name/],
    ["foo.localhost", "foo.localhost", /loopback name/],
    ["a.b.localhost.", "a.b.localhost", /loopback name/],
    ["localhost.localdomain", "localhost.localdomain", /loopback name/],
    ["ip6-localhost", "ip6-localhost", /loopback name/],
    ["ip6-loopback", "ip6-loopback", /loopback name/],
    ["localhost6", "localhost6", /loopback name/],
    ["metadata.google.internal", "metadata.google.internal", /cloud metadata name/],
    ["metadata.google.internal.", "metadata.google.internal", /cloud metadata name/],
    ["metadata.goog", "metadata.goog", /cloud metadata name/],
    ["metadata", "metadata", /cloud metadata name/],
    ["instance-data.ec2.internal", "instance-data.ec2.internal", /cloud metadata name/],
    ["db.internal", "db.internal", /private name/],
    ["printer.local", "printer.local", /private name/],
    ["nas.home.arpa", "nas.home.arpa", /private name/],
    ["router", "router", /single-label name/],
  ];
  for (const [spelling, host, special] of cases) {
    const entry = parseHostEntry(spelling);
    assertEquals(entry.host, host, spelling);
    assertMatch(entry.special ?? "(none)", special, spelling);
  }
});

Deno.test("parseHostEntry() leaves public hosts unmarked and canonical", () => {
  const cases: Array<[string, string]> = [
    ["example.com", "example.com"],
    ["API.Example.COM.", "api.example.com"],
    ["0x7f.example.com", "0x7f.example.com"],
    ["8.8.8.8", "8.8.8.8"],
    ["134744072", "8.8.8.8"],
    ["172.32.0.1", "172.32.0.1"],
    ["100.128.0.1", "100.128.0.1"],
    ["[2606:4700:4700::1111]", "[2606:4700:4700::1111]"],
    ["[2001:db8:0:0:1:0:0:1]", "[2001:db8::1:0:0:1]"],
    ["[2001:db8:0:1:1:1:1:1]", "[2001:db8:0:1:1:1:1:1]"],
    ["[1:0:0:2:0:0:0:3]", "[1:0:0:2::3]"],
  ];
  for (const [spelling, host] of cases) {
    const entry = parseHostEntry(spelling);
    assertEquals(entry, { host, port: undefined, special: undefined }, spelling);
  }
  assertEquals(formatHostEntry(parseHostEntry("Example.com:0443")), "example.com:443");
  assertEquals(formatHostEntry(parseHostEntry("[::1]:80")), "[::1]:80");
});

Deno.test("parseHostEntry() refuses what is not one unambiguous host", () => {
  const cases: Array<[string, RegExp]> = [
    ["1.2.3.4.5", /not a valid IPv4 address/],
    ["256.0.0.1", /not a valid IPv4 address/],
    ["127.0.0.256", /not a valid IPv4 address/],
    ["127.16777216", /not a valid IPv4 address/],
    ["4294967296", /not a valid IPv4 address/],
    ["08.0.0.1", /not a valid IPv4 address/],
    ["0x", /not a valid IPv4 address/],
    ["1.2.3.0x", /not a valid IPv4 address/],
    ["example.123", /not a valid IPv4 address/],
    ["0x7g.0.0.1", /not a valid IPv4 address/],
    ["::1", /IPv6 address in brackets/],
    ["::ffff:127.0.0.1", /IPv6 address in brackets/],
    ["[::1", /expected host or host:port|closing bracket/],
    ["[1::2::3]", /not a valid IPv6 address/],
    ["[::1%eth0]", /not a valid IPv6 address/],
    ["[1:2:3:4:5:6:7:8:9]", /not a valid IPv6 address/],
    ["[1:2:3:4:5:6:7:8::]", /not a valid IPv6 address/],
    ["[::ffff:127.0.0.01]", /not a valid IPv6 address/],
    ["[::ffff:127.1]", /not a valid IPv6 address/],
    ["[:1]", /not a valid IPv6 address/],
    ["[12345::]", /not a valid IPv6 address/],
    ["[]", /not a valid IPv6 address/],
    ["*", /wildcards and address ranges/],
    ["*.example.com", /wildcards and address ranges/],
    ["10.0.0.0/8", /wildcards and address ranges/],
    ["exa_mple.com", /expected host or host:port/],
    ["-a.com", /expected host or host:port/],
    ["a..b", /expected host or host:port/],
    ["localhost..", /expected host or host:port/],
    ["", /expected host or host:port/],
    [":80", /expected host or host:port/],
    ["user@example.com", /expected host or host:port/],
    ["example.com:0", /port from 1 to 65535/],
    ["example.com:65536", /port from 1 to 65535/],
    ["example.com:", /port from 1 to 65535/],
    ["example.com:http", /port from 1 to 65535/],
    ["example.com:80:80", /IPv6 address in brackets/],
  ];
  for (const [entry, message] of cases) assertMatch(syntaxError(entry), message, entry);
});

Deno.test("parseIPv4() and parseIPv6() follow inet_aton and the URL standard", () => {
  assertEquals(parseIPv4("1"), 1);
  assertEquals(parseIPv4("1.2"), 0x01000002);
  assertEquals(parseIPv4("1.2.3"), 0x01020003);
  assertEquals(parseIPv4("255.255.255.255"), 0xffffffff);
  assertEquals(parseIPv4("0xffffffff"), 0xffffffff);
  assertEquals(parseIPv4("037777777777"), 0xffffffff);
  assertEquals(parseIPv4("1.0x1000000"), undefined);
  assertEquals(parseIPv6("::"), [0, 0, 0, 0, 0, 0, 0, 0]);
  assertEquals(parseIPv6("1::"), [1, 0, 0, 0, 0, 0, 0, 0]);
  assertEquals(parseIPv6("1:2:3:4:5:6:7::"), [1, 2, 3, 4, 5, 6, 7, 0]);
  assertEquals(parseIPv6("::2:3:4:5:6:7:8"), [0, 2, 3, 4, 5, 6, 7, 8]);
  assertEquals(parseIPv6("1:2:3:4:5:6:1.2.3.4"), [1, 2, 3, 4, 5, 6, 0x102, 0x304]);
  assertEquals(parseIPv6("1:2:3:4:5:6:7:1.2.3.4"), undefined);
  assertEquals(parseIPv6("1.2.3.4::"), undefined);
});
