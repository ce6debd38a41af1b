// A small live line chart on a canvas: a fixed window of recent points,
// redrawn with the page's current theme colours.

export class Sparkline {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{capacity?: number, max?: number | null, color?: string}} options
   *   max: a fixed top of the scale (e.g. 100 for percentages), else the window's maximum.
   */
  constructor(canvas, { capacity = 90, max = null, color = "--chart-1" } = {}) {
    this.canvas = canvas;
    this.capacity = capacity;
    this.max = max;
    this.color = color;
    this.points = [];
  }

  push(value) {
    this.points.push(value);
    if (this.points.length > this.capacity) this.points.shift();
    this.draw();
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(document.documentElement);
    const color = style.getPropertyValue(this.color).trim() || "#3b5bdb";
    const grid = style.getPropertyValue("--border").trim() || "#ccc";
    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(0, height - 0.5);
    ctx.lineTo(width, height - 0.5);
    ctx.stroke();
    const values = this.points.filter((v) => v !== null && Number.isFinite(v));
    if (!values.length) return;
    const top = this.max ?? Math.max(1e-9, ...values) * 1.15;
    const step = width / Math.max(1, this.capacity - 1);
    const x0 = width - (this.points.length - 1) * step;
    const y = (v) => height - 2 - (Math.min(v, top) / top) * (height - 4);
    ctx.beginPath();
    let started = false;
    this.points.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        started = false;
        return;
      }
      const x = x0 + i * step;
      if (started) ctx.lineTo(x, y(v));
      else ctx.moveTo(x, y(v));
      started = true;
    });
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.8;
    ctx.stroke();
    ctx.lineTo(width, height);
    ctx.lineTo(x0, height);
    ctx.closePath();
    ctx.globalAlpha = 0.12;
    ctx.fillStyle = color;
    ctx.fill();
    ctx.globalAlpha = 1;
  }
}
