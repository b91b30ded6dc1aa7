// Command cosigcheck verifies a histaudit checkpoint note and its witness cosignatures
// with the C2SP reference code, not histaudit's: golang.org/x/mod/sumdb/note opens the
// note, torchwood parses the tlog-checkpoint text and the tlog-policy file and checks the
// quorum (the policy's `log` line names the ledger's checkpoint key).
//
//	cosigcheck POLICY NOTE
//
// Exit 0 and "ok ORIGIN SIZE WITNESSES" when the policy holds; 1 with the reason otherwise.
package main

import (
	"fmt"
	"os"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cosigcheck: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: cosigcheck POLICY NOTE")
	}
	policyText, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	noteBytes, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	policy, err := torchwood.ParsePolicy(policyText)
	if err != nil {
		fail("policy: %v", err)
	}
	n, err := note.Open(noteBytes, policy)
	if err != nil {
		fail("note: %v", err)
	}
	cp, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		fail("checkpoint: %v", err)
	}
	if err := policy.Check(cp.Origin, n.Sigs); err != nil {
		fail("policy check: %v", err)
	}
	cosigners := 0
	for _, sig := range n.Sigs {
		if _, err := torchwood.CosignatureTimestamp(sig); err == nil && sig.Name != cp.Origin {
			cosigners++
		}
	}
	fmt.Printf("ok %s %d %d\n", cp.Origin, cp.N, cosigners)
}
