// Command argocd-health evaluates an Argo CD resource health check (a health.lua script) for
// Kubernetes objects the way Argo CD's application controller runs the scripts of
// resource.customizations: gopher-lua with the standard libraries skipped and only package,
// base and table opened, the object as the global `obj` (JSON numbers as Lua numbers), a
// one-second deadline, and the returned table's `status` checked against the health codes Argo
// CD accepts. Argo CD also opens a reduced `os`; it is left out here, so a script that needs it
// fails instead of passing by accident.
//
// Usage: argocd-health SCRIPT.lua OBJECT.json...
//
// Prints one JSON object per input: {"object": path, "status": ..., "message": ...}, or
// {"object": path, "error": ...} when the script fails or returns something Argo CD rejects.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The health codes Argo CD accepts from a script; anything else becomes Unknown.
var validStatus = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true,
	"Healthy": true, "Degraded": true, "Missing": true,
}

type result struct {
	Object  string `json:"object"`
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health SCRIPT.lua OBJECT.json...")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[2:] {
		r := result{Object: path}
		object, err := readObject(path)
		if err == nil {
			r.Status, r.Message, err = evaluate(string(script), object)
		}
		if err != nil {
			r.Error = err.Error()
		}
		if err := out.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func readObject(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var object map[string]interface{}
	if err := decoder.Decode(&object); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return object, nil
}

// evaluate runs the script with `obj` set and reads the table it returns.
func evaluate(script string, object map[string]interface{}) (string, string, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true},
			lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, object))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	returned, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	status, ok := returned.RawGetString("status").(lua.LString)
	if !ok || !validStatus[string(status)] {
		return "Unknown", "Lua returned an invalid health status", nil
	}
	message := ""
	switch m := returned.RawGetString("message").(type) {
	case lua.LString:
		message = string(m)
	case *lua.LNilType:
	default:
		return "", "", fmt.Errorf("message is a %s, not a string", m.Type())
	}
	return string(status), message, nil
}

// toLua converts decoded JSON the way Argo CD passes objects to scripts: integers and floats
// become numbers, objects and arrays tables, null nil.
func toLua(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return lua.LNumber(i)
		}
		f, _ := v.Float64()
		return lua.LNumber(f)
	case []interface{}:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]interface{}:
		t := l.CreateTable(0, len(v))
		for key, item := range v {
			t.RawSetH(lua.LString(key), toLua(l, item))
		}
		return t
	}
	return lua.LNil
}
