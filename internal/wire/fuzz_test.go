package wire

import (
	"strings"
	"testing"
)

// Parsing reads what another writer may have put on a blob: it never
// panics, whatever it is given, and what it reads as valid builds back to
// the same values. `go test` runs these on their seed corpus only; `go test
// -fuzz FuzzParseRecord` searches further.

func FuzzParseRecord(f *testing.F) {
	for _, seed := range [][8]string{
		{"7", "node-a", "2024-05-06T07:08:09.123456789Z", "", "15s", "mutex", "", ""},
		{"41", "", "", "2000-01-01T00:00:00Z", "", "shard", "", ""},
		{"9223372036854775807", "z", "2024-05-06T07:08:09+02:00", "", "24h", "session", "3", "b"},
		{"seven", " a ", "noon", "yesterday", "2562047h", "", "high", ""},
		{"-3", "x", "0001-01-01T00:00:00Z", "", "1ms", "held", "-2", "next"},
		{"+5", "", "", "", "3s", "LEADER", "0x10", ""},
		{"", "", "", "", "", "", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], seed[6], seed[7])
	}
	f.Fuzz(func(t *testing.T, term, identity, since, ended, duration, role, priority, next string) {
		m := md(MetaTerm, term, MetaIdentity, identity, MetaSince, since, MetaEnded, ended,
			MetaLeaseDuration, duration, MetaRole, role, MetaPriority, priority, MetaNext, next)
		r := ParseRecord(m)
		switch {
		case r.TermBad != (r.Problem != nil && r.Problem.Key == MetaTerm):
			t.Fatalf("TermBad %v, problem %+v", r.TermBad, r.Problem)
		case r.Problem != nil && r.Problem.Key == MetaLeaseDuration && r.Declared != MaxDeclarable:
			t.Fatalf("a duration that does not read is timed as %v", r.Declared)
		case r.Declared != 0 && (r.Declared < MinDeclarable || r.Declared > MaxDeclarable):
			t.Fatalf("declared %v", r.Declared)
		case r.Term.Number < 0:
			t.Fatalf("term %d", r.Term.Number)
		case r.EndMark != (ended != ""):
			t.Fatalf("end mark %v for %q", r.EndMark, ended)
		}
		ParseListed(m)
		if r.Problem != nil || r.Declared == 0 {
			return // not a whole, valid term record: nothing to build back
		}
		back := ParseRecord(RecordMetadata(r.Term, r.Declared, r.Role))
		if back.Problem != nil || back.Term.Number != r.Term.Number || back.Term.Identity != r.Term.Identity ||
			!back.Term.Since.Equal(r.Term.Since) || back.Declared != r.Declared || back.Role != r.Role {
			t.Fatalf("built back as %+v, read %+v", back, r)
		}
	})
}

func FuzzParseHeld(f *testing.F) {
	f.Add("a 3 0 \"0x1\"\nb 7 2 \"0x2\"", "2", "held")
	f.Add("", "0", "held")
	f.Add("  t/a:b   3 1 \"1\"  ", "1", "held")
	f.Add("a 3 0 \"0x1\"", "1", "")
	f.Add("a 3 1 \"1\"\n", "2", "held")
	f.Add("a/../b 3 1 \"1\"", "1", "held")
	f.Add("a 9223372036854775808 1 \"1\"", "1", "held")
	f.Add("a 3 1 \"1\"", "01", "held")
	f.Fuzz(func(t *testing.T, text, count, role string) {
		hs, err := ParseHeld(text, count, role)
		if err != nil {
			if hs != nil {
				t.Fatalf("refused, yet %d entries", len(hs))
			}
			return
		}
		lines := make([]string, len(hs))
		for i, e := range hs {
			if e.Term < 1 || e.Gen < 0 || NameProblem(e.Name) != "" || e.ETag == "" {
				t.Fatalf("read an entry that does not keep the rules: %+v", e)
			}
			lines[i] = HeldLine(e)
		}
		back := strings.Join(lines, "\n")
		m := HeldMetadata(back)
		again, err := ParseHeld(back, Value(m, MetaHeld), Value(m, MetaRole))
		if err != nil || len(again) != len(hs) {
			t.Fatalf("built back as %q, which reads %d entries, %v", back, len(again), err)
		}
		for i := range hs {
			if again[i] != hs[i] {
				t.Fatalf("entry %d built back as %+v, read %+v", i, again[i], hs[i])
			}
		}
	})
}

func FuzzParseNote(f *testing.F) {
	f.Add("s1 3 \"0x1\";s2 4 \"0x2\"")
	f.Add("")
	f.Add(";")
	f.Add("s1 3 \"0x1\";;bad;s2 0 \"e\"; s3 5 \"e\" ")
	f.Add("s* 1 \"e\";a.b 2 \"e\"")
	f.Add("t/a:b@c=d~e_f.g 9223372036854775807 W/\"x\"")
	f.Fuzz(func(t *testing.T, entries string) {
		hs := ParseNote(entries)
		for _, h := range hs {
			if h.Term < 1 || NameProblem(h.Name) != "" || h.ETag == "" {
				t.Fatalf("read an entry that does not keep the rules: %+v", h)
			}
			if again, why := ParseNoteEntry(NoteEntry(h)); why != "" || again != h {
				t.Fatalf("%+v built back as %q, which reads %+v (%s)", h, NoteEntry(h), again, why)
			}
		}
		var back []Handed
		for _, part := range NoteParts(hs) {
			back = append(back, ParseNote(part)...)
		}
		if len(back) != len(hs) {
			t.Fatalf("built back as %d entries, read %d", len(back), len(hs))
		}
		for i := range hs {
			if back[i] != hs[i] {
				t.Fatalf("entry %d built back as %+v, read %+v", i, back[i], hs[i])
			}
		}
	})
}
