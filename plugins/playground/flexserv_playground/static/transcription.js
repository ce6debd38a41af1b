// Transcription: upload a file or record from the microphone, then
// /v1/audio/transcriptions (verbose_json for segments; streamed when advertised).

import { api, sseEvents } from "./api.js";
import { features } from "./catalog.js";
import { el } from "./ui.js";

const $ = (id) => document.getElementById(id);
let recorded = null; // a Blob from the microphone, used until another file is chosen
let recorder = null;

export function initTranscription() {
  $("tr-run").addEventListener("click", run);
  $("tr-file").addEventListener("change", () => {
    recorded = null;
    const file = $("tr-file").files[0];
    if (file) preview(file);
  });
  const record = $("tr-record");
  if (!navigator.mediaDevices?.getUserMedia || typeof MediaRecorder === "undefined") {
    record.disabled = true;
    record.title = "Recording needs a secure context (https or localhost) and a browser with MediaRecorder.";
  }
  record.addEventListener("click", toggleRecording);
}

function preview(blob) {
  const audio = $("tr-audio");
  if (audio.src) URL.revokeObjectURL(audio.src);
  audio.src = URL.createObjectURL(blob);
  audio.hidden = false;
}

async function toggleRecording() {
  const button = $("tr-record");
  if (recorder) {
    recorder.stop();
    return;
  }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
    recorder.addEventListener("stop", () => {
      stream.getTracks().forEach((track) => track.stop());
      recorded = new Blob(chunks, { type: recorder.mimeType || "audio/webm" });
      recorder = null;
      button.setAttribute("aria-pressed", "false");
      button.textContent = "● Record";
      $("tr-file").value = "";
      preview(recorded);
      $("tr-status").textContent = `Recorded ${(recorded.size / 1024).toFixed(0)} KiB.`;
    });
    recorder.start();
    button.setAttribute("aria-pressed", "true");
    button.textContent = "■ Stop recording";
    $("tr-status").textContent = "Recording…";
  } catch (error) {
    $("tr-status").textContent = `Microphone unavailable: ${error.message}`;
  }
}

function extensionFor(type) {
  if (type.includes("ogg")) return "ogg";
  if (type.includes("mp4")) return "m4a";
  return "webm";
}

async function run() {
  const file = recorded ?? $("tr-file").files[0];
  if (!file) {
    $("tr-status").textContent = "Choose an audio file or record one first.";
    return;
  }
  const stream = features().has("transcription_stream");
  const form = new FormData();
  form.append("file", file, file.name || `recording.${extensionFor(file.type)}`);
  form.append("model", $("tr-model").value);
  form.append("response_format", stream ? "json" : "verbose_json");
  const language = $("tr-language").value.trim();
  if (language) form.append("language", language);
  if (stream) form.append("stream", "true");
  $("tr-run").disabled = true;
  $("tr-text").textContent = "";
  $("tr-segments").replaceChildren();
  $("tr-status").textContent = "Transcribing…";
  const started = performance.now();
  try {
    const response = await api("/v1/audio/transcriptions", { method: "POST", body: form });
    let body;
    if (stream && (response.headers.get("content-type") || "").includes("text/event-stream")) {
      for await (const event of sseEvents(response)) {
        if (event.delta) $("tr-text").textContent += event.delta;
        if (event.text !== undefined && event.type?.endsWith("done")) body = event;
      }
    } else {
      body = await response.json();
      $("tr-text").textContent = (body.text || "").trim();
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    const duration = body?.duration ? ` of ${Number(body.duration).toFixed(1)} s audio` : "";
    $("tr-status").textContent = `Done in ${seconds} s${duration}${body?.language ? ` · language ${body.language}` : ""}`;
    for (const segment of body?.segments || []) {
      $("tr-segments").append(
        el("li", {}, el("span", { className: "t" }, `${segment.start.toFixed(1)}–${segment.end.toFixed(1)} s`), segment.text.trim()),
      );
    }
  } catch (error) {
    $("tr-status").textContent = `Error: ${error.message}`;
  } finally {
    $("tr-run").disabled = false;
  }
}
