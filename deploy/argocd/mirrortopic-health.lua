-- Argo CD health of a kmirror.io/v1alpha1 MirrorTopic, from the status the kmirror operator writes.
-- Argo CD runs resource.customizations scripts without Lua's string library: only base and
-- table functions are used here.
--   Progressing  no status yet, a spec change not yet observed, partitions moving to spec.state
--   Healthy      every partition MIRRORING; or failed over (spec.state Stopped, all STOPPED)
--   Suspended    spec.state Paused and every partition PAUSED
--   Degraded     a partition FAILED, or the topic cannot be served (Ready False for a reason
--                other than Progressing: source or destination unreachable, missing Secret, ...)
local hs = {}

local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function count(partitions, state)
  local n = 0
  for _, p in ipairs(partitions) do
    if p.state == state then
      n = n + 1
    end
  end
  return n
end

local generation = obj.metadata.generation
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to report the topic"
  return hs
end
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to observe generation " .. generation
  return hs
end

local desired = "Mirroring"
if obj.spec ~= nil and obj.spec.state ~= nil then
  desired = obj.spec.state
end
-- The counts cover every partition; a large topic lists only its worst partitions (status
-- written before the counts existed: count the list).
local partitions = status.partitions or {}
local counts = status.partitionCounts
local function inState(state, key)
  if counts ~= nil then
    return counts[key] or 0
  end
  return count(partitions, state)
end
local total = #partitions
if counts ~= nil then
  total = counts.total or 0
end
local failed = inState("FAILED", "failed")
local failedCondition = condition(status.conditions, "Failed")
if failed > 0 or (failedCondition ~= nil and failedCondition.status == "True") then
  hs.status = "Degraded"
  if failedCondition ~= nil and failedCondition.status == "True" then
    hs.message = failed .. " of " .. total .. " partitions FAILED: " .. failedCondition.message
  else
    hs.message = failed .. " of " .. total .. " partitions FAILED"
  end
  return hs
end
if desired == "Stopped" and total > 0 and inState("STOPPED", "stopped") == total then
  hs.status = "Healthy"
  hs.message = "Failed over: all " .. total .. " partitions STOPPED, the destination topic is writable"
  return hs
end
if desired == "Paused" and total > 0 and inState("PAUSED", "paused") == total then
  hs.status = "Suspended"
  hs.message = "Paused: all " .. total .. " partitions PAUSED, nothing is copied"
  return hs
end

local ready = condition(status.conditions, "Ready")
if ready == nil or (generation ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to report readiness"
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
if ready.reason == "Progressing" then
  hs.status = "Progressing"
  hs.message = ready.message
  return hs
end
hs.status = "Degraded"
hs.message = ready.reason .. ": " .. ready.message
return hs
