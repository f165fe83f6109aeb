-- Argo CD health of a kmirror.io/v1alpha1 ClusterMirror, from the status the kmirror operator
-- writes (its Ready condition and the partition counts over its MirrorTopics). Argo CD runs
-- resource.customizations scripts without Lua's string library: only base and table functions
-- are used here.
--   Progressing  no status yet, a spec change not yet observed, partitions not settled yet
--                (Ready False with reason Progressing, Reconciling True)
--   Healthy      Ready; or every partition failed over (STOPPED), even with the source gone
--   Suspended    every partition PAUSED
--   Degraded     Ready False otherwise: invalid spec, a cluster unreachable, partitions FAILED
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

local function number(value)
  if value == nil then
    return 0
  end
  return value
end

local generation = obj.metadata.generation
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to report the mirror"
  return hs
end
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to observe generation " .. generation
  return hs
end

local counts = status.partitions or {}
local total = number(counts.total)
local stopped = number(counts.stopped)
local paused = number(counts.paused)
local failed = number(counts.failed)
local unsettled = number(counts.unknown) + number(counts.preparing) + number(counts.stopping)
local ready = condition(status.conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kmirror operator to report readiness"
  return hs
end
if ready.reason ~= "InvalidSpec" and total > 0 and stopped == total then
  hs.status = "Healthy"
  hs.message = "Failed over: all " .. total .. " partitions STOPPED"
  if ready.status ~= "True" then
    hs.message = hs.message .. " (" .. ready.reason .. ": " .. ready.message .. ")"
  end
  return hs
end
if ready.status ~= "True" and ready.reason == "Progressing" then
  hs.status = "Progressing"
  hs.message = ready.message
  return hs
end
if ready.status ~= "True" then
  hs.status = "Degraded"
  hs.message = ready.reason .. ": " .. ready.message
  return hs
end
if failed > 0 then
  hs.status = "Degraded"
  hs.message = failed .. " of " .. total .. " partitions FAILED (see the MirrorTopics)"
  return hs
end
if total > 0 and paused == total then
  hs.status = "Suspended"
  hs.message = "Paused: all " .. total .. " partitions PAUSED"
  return hs
end
if unsettled > 0 then
  hs.status = "Progressing"
  hs.message = number(counts.mirroring) .. " of " .. total .. " partitions MIRRORING, " .. unsettled .. " on their way"
  return hs
end
hs.status = "Healthy"
hs.message = ready.message
return hs
